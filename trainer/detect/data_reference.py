"""An independent reading of detection data, for detect_data_test.

Written from YOLOv5's utils/dataloaders.py (verify_image_label,
img2label_paths) with numpy only (no cv2 or PIL), so the C++ reader is
checked against a second implementation. Run by /usr/bin/python3.

  data_reference.py labels IMAGES_DIR   one JSON line per image file below
      IMAGES_DIR (sorted): {"image": path's bytes in hex, "labels": [[cls, cx, cy, w, h],
      ...]} or {"image": path, "corrupt": reason}
  data_reference.py png OUT W H KIND    writes a PNG of W x H pixels whose
      pixel (x, y) is ((37x + 11y) % 256, (x * y) % 256, (255 - 13x) % 256);
      KIND: rgb, grey (the first channel only), rgba (alpha 128), rgb16
      (each sample v as the 16-bit v * 257)
"""

import json
import os
import struct
import sys
import zlib

import numpy as np

IMG_FORMATS = ('bmp', 'dng', 'jpeg', 'jpg', 'mpo', 'png', 'tif', 'tiff', 'webp')


def label_path(image_path):
    """YOLOv5's img2label_paths for one path."""
    a, b = os.sep + 'images' + os.sep, os.sep + 'labels' + os.sep
    return b.join(image_path.rsplit(a, 1)).rsplit('.', 1)[0] + '.txt'


def read_labels(path):
    """The labels of one file as YOLOv5 checks them, boxes clipped to the image."""
    with open(path, 'rb') as f:
        text = f.read().decode('utf-8', errors='replace')
    rows = [line.split() for line in text.splitlines() if line.split()]
    boxes = []
    for row in rows:
        if len(row) > 6:  # a polygon: its bounding box
            if len(row) % 2 == 0:
                raise ValueError('odd polygon')
            xy = np.array(row[1:], dtype=np.float64).reshape(-1, 2)
            if not np.isfinite(xy).all() or (xy < 0).any() or (xy > 1).any():
                raise ValueError('polygon out of bounds')
            x0, y0 = xy.min(0)
            x1, y1 = xy.max(0)
            boxes.append([float(row[0]), (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0])
        else:
            boxes.append(row)
    lb = np.array(boxes, dtype=np.float64).reshape(-1, 5) if boxes else np.zeros((0, 5))
    if not np.isfinite(lb).all():
        raise ValueError('not finite')
    if (lb < 0).any():
        raise ValueError('negative label values')
    if (lb[:, 1:] > 1).any():
        raise ValueError('non-normalized or out of bounds coordinates')
    xyxy = np.stack([lb[:, 1] - lb[:, 3] / 2, lb[:, 2] - lb[:, 4] / 2,
                     lb[:, 1] + lb[:, 3] / 2, lb[:, 2] + lb[:, 4] / 2], 1).clip(0, 1)
    out = np.stack([lb[:, 0], (xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2,
                    xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]], 1).astype(np.float32)
    _, first = np.unique(out, axis=0, return_index=True)
    return out[np.sort(first)]


def labels_command(images_dir):
    files = []
    for root, _, names in os.walk(images_dir):
        files += [os.path.join(root, n) for n in names if n.rsplit('.', 1)[-1].lower() in IMG_FORMATS]
    for image in sorted(files, key=os.fsencode):
        record = {'image': os.fsencode(image).hex()}
        lb_file = label_path(image)
        try:
            lb = read_labels(lb_file) if os.path.isfile(lb_file) else np.zeros((0, 5))
            record['labels'] = [[float(v) for v in row] for row in lb]
        except ValueError as e:
            record['corrupt'] = str(e)
        print(json.dumps(record, ensure_ascii=True))


def png_command(out, w, h, kind):
    x = np.arange(w)[None, :].repeat(h, 0)
    y = np.arange(h)[:, None].repeat(w, 1)
    rgb = np.stack([(37 * x + 11 * y) % 256, (x * y) % 256, (255 - 13 * x) % 256], 2)
    if kind == 'grey':
        pixels, color_type, depth = rgb[:, :, :1].astype('>u1'), 0, 8
    elif kind == 'rgba':
        alpha = np.full((h, w, 1), 128)
        pixels, color_type, depth = np.concatenate([rgb, alpha], 2).astype('>u1'), 6, 8
    elif kind == 'rgb16':
        pixels, color_type, depth = (rgb * 257).astype('>u2'), 2, 16
    else:
        pixels, color_type, depth = rgb.astype('>u1'), 2, 8
    raw = b''.join(b'\0' + pixels[row].tobytes() for row in range(h))

    def chunk(tag, data):
        return struct.pack('>I', len(data)) + tag + data + struct.pack('>I', zlib.crc32(tag + data))

    ihdr = struct.pack('>IIBBBBB', w, h, depth, color_type, 0, 0, 0)
    with open(out, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', zlib.compress(raw)) +
                chunk(b'IEND', b''))


if __name__ == '__main__':
    if sys.argv[1] == 'labels':
        labels_command(sys.argv[2])
    else:
        png_command(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
