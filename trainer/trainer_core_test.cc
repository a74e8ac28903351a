// Torch-free parts of the trainer: schedule formulas, sampler index math,
// IDX reading and its errors, flags, metrics, digests.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint_file.h"
#include "trainer/digest.h"
#include "trainer/idx.h"
#include "trainer/loss_scaler.h"
#include "trainer/metrics.h"
#include "trainer/options.h"
#include "trainer/plot.h"
#include "trainer/sampler.h"
#include "trainer/schedule.h"
#include "trainer/test_files.h"

namespace elastrun::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::elastrun::trainer::testing::TestDir;

// ---------------------------------------------------------------- schedule

ScheduleOptions Hyp() {
  ScheduleOptions o;
  o.epochs = 10;
  o.lrf = 0.01;
  o.one_cycle = true;
  o.warmup_epochs = 3.0;
  o.warmup_momentum = 0.8;
  o.warmup_bias_lr = 0.1;
  o.momentum = 0.937;
  return o;
}

TEST(ScheduleTest, WarmupLengthIsAtLeast100Iterations) {
  EXPECT_EQ(YoloV5Schedule::Create(Hyp(), 0.01, 469, 64, 128)->warmup_iters(), 1407);
  EXPECT_EQ(YoloV5Schedule::Create(Hyp(), 0.01, 20, 64, 128)->warmup_iters(), 100);
  ScheduleOptions o = Hyp();
  o.warmup_epochs = 0.5;
  // round(0.5 * 5) = round(2.5) = 2 in Python; still 100.
  EXPECT_EQ(YoloV5Schedule::Create(o, 0.01, 5, 64, 128)->warmup_iters(), 100);
  o.warmup_epochs = 2.5;
  // round(2.5 * 101) = round(252.5) = 252 (half to even).
  EXPECT_EQ(YoloV5Schedule::Create(o, 0.01, 101, 64, 128)->warmup_iters(), 252);
}

TEST(ScheduleTest, CosineAndLinearLrFactors) {
  auto s = YoloV5Schedule::Create(Hyp(), 0.01, 469, 64, 64);
  ASSERT_TRUE(s.ok());
  for (int e : {0, 1, 5, 9, 10}) {
    const double want = ((1 - std::cos(e * M_PI / 10)) / 2) * (0.01 - 1) + 1;
    EXPECT_NEAR(s->LrFactor(e), want, 1e-15) << e;
  }
  EXPECT_DOUBLE_EQ(s->LrFactor(0), 1.0);
  EXPECT_NEAR(s->LrFactor(10), 0.01, 1e-15);
  ScheduleOptions o = Hyp();
  o.one_cycle = false;
  auto lin = YoloV5Schedule::Create(o, 0.01, 469, 64, 64);
  for (int e : {0, 3, 10}) {
    EXPECT_NEAR(lin->LrFactor(e), (1 - e / 10.0) * (1 - 0.01) + 0.01, 1e-15);
  }
}

TEST(ScheduleTest, WarmupValuesFollowYoloV5Formulas) {
  // nb = 100 -> nw = 300; nbs 64 over a global batch of 16 -> accumulate 4.
  auto s = YoloV5Schedule::Create(Hyp(), 0.01, 100, 64, 16);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->warmup_iters(), 300);
  IterationValues v = s->At(0, 0);
  EXPECT_DOUBLE_EQ(v.bias_lr, 0.1);
  EXPECT_DOUBLE_EQ(v.lr, 0.0);
  EXPECT_DOUBLE_EQ(v.momentum, 0.8);
  EXPECT_EQ(v.accumulate, 1);
  // ni = 150, epoch 1: halfway; target lr0 * lf(1).
  const double target = 0.01 * s->LrFactor(1);
  v = s->At(150, 1);
  EXPECT_NEAR(v.bias_lr, 0.1 + 0.5 * (target - 0.1), 1e-15);
  EXPECT_NEAR(v.lr, 0.5 * target, 1e-15);
  EXPECT_NEAR(v.momentum, 0.8 + 0.5 * (0.937 - 0.8), 1e-15);
  EXPECT_EQ(v.accumulate, 2);  // round(interp = 2.5) = 2, half to even
  v = s->At(60, 0);
  EXPECT_EQ(v.accumulate, 2);  // round(1 + 0.2 * 3 = 1.6)
  EXPECT_NEAR(v.lr, 0.2 * 0.01, 1e-15);
  v = s->At(300, 2);  // the last warm-up iteration reaches the targets
  EXPECT_NEAR(v.lr, 0.01 * s->LrFactor(2), 1e-15);
  EXPECT_NEAR(v.bias_lr, 0.01 * s->LrFactor(2), 1e-15);
  EXPECT_DOUBLE_EQ(v.momentum, 0.937);
  EXPECT_EQ(v.accumulate, 4);
  v = s->At(750, 7);  // after warm-up
  EXPECT_DOUBLE_EQ(v.lr, 0.01 * s->LrFactor(7));
  EXPECT_DOUBLE_EQ(v.bias_lr, v.lr);
  EXPECT_DOUBLE_EQ(v.momentum, 0.937);
  EXPECT_EQ(v.accumulate, 4);
}

TEST(ScheduleTest, AccumulationAndWeightDecayScaling) {
  // Global batch 128 > nbs 64: accumulate max(round(0.5), 1) = 1, decay x2.
  auto big = YoloV5Schedule::Create(Hyp(), 0.01, 10, 64, 128);
  EXPECT_EQ(big->accumulate(), 1);
  EXPECT_DOUBLE_EQ(big->ScaledWeightDecay(0.0005), 0.001);
  // Global batch 24: accumulate round(2.667) = 3, decay * 24 * 3 / 64.
  auto small = YoloV5Schedule::Create(Hyp(), 0.01, 10, 64, 24);
  EXPECT_EQ(small->accumulate(), 3);
  EXPECT_DOUBLE_EQ(small->ScaledWeightDecay(0.0005), 0.0005 * 72 / 64);
}

TEST(ScheduleTest, RejectsBadSizes) {
  EXPECT_FALSE(YoloV5Schedule::Create(Hyp(), 0.01, 0, 64, 64).ok());
  ScheduleOptions o = Hyp();
  o.epochs = 0;
  EXPECT_THAT(std::string(YoloV5Schedule::Create(o, 0.01, 1, 64, 64).status().message()),
              HasSubstr("epochs"));
}

TEST(ScheduleTest, RoundHalfEvenIsPythons) {
  EXPECT_EQ(RoundHalfEven(0.5), 0);
  EXPECT_EQ(RoundHalfEven(1.5), 2);
  EXPECT_EQ(RoundHalfEven(2.5), 2);
  EXPECT_EQ(RoundHalfEven(2.6), 3);
}

// ----------------------------------------------------------------- sampler

// A fixed "permutation" (reversal) so the index math is checked alone.
std::vector<int64_t> Reverse(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.rbegin(), p.rend(), 0);
  std::rotate(p.begin(), p.begin() + static_cast<int64_t>(seed % n), p.end());
  return p;
}

TEST(SamplerTest, PaddedShardsAreEqualAndCoverEverything) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t n : {1, 5, 10, 11, 60}) {
      std::multiset<int64_t> all;
      for (int r = 0; r < world; ++r) {
        auto s = DistributedSampler::Create(n, world, r, {}, Reverse);
        ASSERT_TRUE(s.ok());
        s->set_epoch(3);
        std::vector<int64_t> mine = s->Indices();
        EXPECT_EQ(static_cast<int64_t>(mine.size()), (n + world - 1) / world);
        all.insert(mine.begin(), mine.end());
      }
      std::set<int64_t> distinct(all.begin(), all.end());
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << world << " " << n;
      // Only padding repeats: total - n duplicates.
      EXPECT_EQ(static_cast<int64_t>(all.size()), ((n + world - 1) / world) * world);
    }
  }
}

TEST(SamplerTest, DropLastShardsAreDisjoint) {
  const int world = 4;
  const int64_t n = 11;
  std::set<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    SamplerOptions o;
    o.drop_last = true;
    auto s = DistributedSampler::Create(n, world, r, o, Reverse);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->num_samples(), 2);  // ceil((11 - 4) / 4)
    for (int64_t i : s->Indices()) EXPECT_TRUE(seen.insert(i).second) << i;
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(SamplerTest, PaddingRepeatsTheHeadLikePyTorch) {
  // n = 3, world = 8: total 8; indices + (indices * ceil(5 / 3))[:5].
  SamplerOptions o;
  o.shuffle = false;
  auto s = DistributedSampler::Create(3, 8, 0, o, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(s->GlobalOrder(), ElementsAre(0, 1, 2, 0, 1, 2, 0, 1));
}

TEST(SamplerTest, SeedPlusEpochReachesThePermutation) {
  std::vector<uint64_t> seeds;
  SamplerOptions o;
  o.seed = 40;
  auto s = DistributedSampler::Create(10, 2, 1, o, [&](int64_t n, uint64_t seed) {
    seeds.push_back(seed);
    return Reverse(n, 0);
  });
  s->set_epoch(2);
  EXPECT_THAT(s->Indices(), ElementsAre(8, 6, 4, 2, 0));
  EXPECT_THAT(seeds, ElementsAre(42u));
}

TEST(SamplerTest, ResumeOffsetSkipsTrainedSamples) {
  auto s = DistributedSampler::Create(20, 2, 1, {}, Reverse);
  s->set_epoch(1);
  const std::vector<int64_t> all = s->Indices();
  const std::vector<int64_t> rest = s->Indices(4);
  ASSERT_EQ(rest.size(), all.size() - 4);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + 4));
  EXPECT_TRUE(s->Indices(100).empty());
}

TEST(SamplerTest, RejectsBadArguments) {
  EXPECT_FALSE(DistributedSampler::Create(0, 1, 0, {}, Reverse).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, 2, 2, {}, Reverse).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, 2, 0, {}, nullptr).ok());
}

TEST(SamplerTest, EvalShardCountsEverySampleOnce) {
  std::set<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    for (int64_t i : EvalShard(10, 3, r)) EXPECT_TRUE(seen.insert(i).second);
  }
  EXPECT_EQ(seen.size(), 10u);
}

// --------------------------------------------------------------------- IDX

std::string IdxBytes(int rank, const std::vector<uint32_t>& dims, size_t data_bytes) {
  std::string s = {0, 0, 8, static_cast<char>(rank)};
  for (uint32_t d : dims) {
    s.push_back(static_cast<char>(d >> 24));
    s.push_back(static_cast<char>(d >> 16));
    s.push_back(static_cast<char>(d >> 8));
    s.push_back(static_cast<char>(d));
  }
  for (size_t i = 0; i < data_bytes; ++i) s.push_back(static_cast<char>(i % 7));
  return s;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(IdxTest, ReadsGzippedArray) {
  const std::string path = TestDir() + "/a.gz";
  WriteGz(path, IdxBytes(3, {2, 3, 4}, 24));
  auto a = ReadIdxFile(path, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->dims, ElementsAre(2, 3, 4));
  ASSERT_EQ(a->data.size(), 24u);
  EXPECT_EQ(a->data[8], 1);
}

TEST(IdxTest, ErrorsNameTheFileAndTheProblem) {
  const std::string dir = TestDir();
  auto error = [](const std::string& path, int rank) {
    auto a = ReadIdxFile(path, rank);
    return a.ok() ? std::string("<ok>") : std::string(a.status().message());
  };
  EXPECT_THAT(error(dir + "/missing.gz", 1), HasSubstr(dir + "/missing.gz: no such file"));
  WriteGz(dir + "/short.gz", IdxBytes(1, {10}, 9));
  EXPECT_THAT(error(dir + "/short.gz", 1), HasSubstr("short.gz: truncated"));
  WriteGz(dir + "/long.gz", IdxBytes(1, {10}, 11));
  EXPECT_THAT(error(dir + "/long.gz", 1), HasSubstr("long.gz: trailing data"));
  WriteGz(dir + "/rank.gz", IdxBytes(2, {2, 2}, 4));
  EXPECT_THAT(error(dir + "/rank.gz", 3), HasSubstr("IDX rank 2, expected 3"));
  WriteGz(dir + "/magic.gz", "\x12\x34\x08\x01");
  EXPECT_THAT(error(dir + "/magic.gz", 1), HasSubstr("not an IDX file"));
  WriteGz(dir + "/header.gz", std::string("\0\0\x08", 3));
  EXPECT_THAT(error(dir + "/header.gz", 1), HasSubstr("truncated header"));
  // A gzip stream cut in the middle.
  {
    const std::string full = dir + "/full.gz";
    WriteGz(full, IdxBytes(1, {100000}, 100000));
    std::ifstream in(full, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir + "/cut.gz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  EXPECT_THAT(error(dir + "/cut.gz", 1), HasSubstr("cut.gz"));
}

TEST(IdxTest, FashionMnistChecksCountsAndLabels) {
  const std::string dir = TestDir();
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", IdxBytes(3, {7, 2, 2}, 28));
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", IdxBytes(1, {6}, 6));
  auto d = ReadFashionMnist(dir, false, 10);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("holds 7 images but"));
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", IdxBytes(1, {7}, 7));
  d = ReadFashionMnist(dir, false, 5);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("label 5 at index 5"));
  d = ReadFashionMnist(dir, false, 10);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 7);
  d = ReadFashionMnist(dir, true, 10);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("train-images-idx3-ubyte.gz"));
}

TEST(IdxTest, ReadsTheInstalledFashionMnist) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto d = ReadFashionMnist(root, false, 10);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 10000);
  EXPECT_THAT(d->images.dims, ElementsAre(10000, 28, 28));
}

// ------------------------------------------------------------------- flags

TEST(FlagsTest, ParsesConfigOverridesAndModes) {
  auto f = ParseFlags({"--config", "a.yaml", "train.epochs=2", "~data.x", "+a.b=1",
                       "--print-config"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->config, "a.yaml");
  EXPECT_THAT(f->overrides, ElementsAre("train.epochs=2", "~data.x", "+a.b=1"));
  EXPECT_TRUE(f->print_config);
  EXPECT_FALSE(f->resume.has_value());
  f = ParseFlags({"--config=b.yaml", "--resume", "x=1"});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->resume, "");
  EXPECT_THAT(f->overrides, ElementsAre("x=1"));
  f = ParseFlags({"--config=b.yaml", "--resume", "runs/last.ckpt"});
  EXPECT_EQ(*f->resume, "runs/last.ckpt");
  EXPECT_TRUE(ParseFlags({"--list-targets"}).ok());
}

TEST(FlagsTest, Errors) {
  EXPECT_EQ(std::string(ParseFlags({"--bogus"}).status().message()), "unknown flag --bogus");
  EXPECT_THAT(std::string(ParseFlags({"a=1"}).status().message()), HasSubstr("--config"));
  EXPECT_EQ(std::string(ParseFlags({"--config"}).status().message()),
            "--config needs a value");
  auto valued = ParseFlags({"--config=a", "--print-config=1"});
  ASSERT_FALSE(valued.ok());
  EXPECT_EQ(std::string(valued.status().message()), "--print-config takes no value");
}

TEST(FlagsTest, HelpAndVersion) {
  EXPECT_TRUE(ParseFlags({"--help"})->help);
  EXPECT_TRUE(ParseFlags({"--version"})->version);
  const std::string usage = Usage();
  EXPECT_THAT(usage, ::testing::StartsWith("usage: elastrun-train --config FILE"));
  for (const char* flag : {"--config FILE", "--print-config", "--list-targets",
                           "--resume [PATH]", "--version", "--help"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
}

// ----------------------------------------------------------- misc helpers

TEST(DigestTest, KnownVector) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.HexDigest(), Sha256Hex("abc"));
}

TEST(MetricsTest, WritesHeaderAndRows) {
  const std::string path = TestDir() + "/metrics.csv";
  {
    auto w = MetricsWriter::Open(path, false);
    ASSERT_TRUE(w.ok());
    EpochMetrics m;
    m.epoch = 1;
    m.test_acc = 0.5;
    ASSERT_TRUE(w->Append(m).ok());
  }
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_THAT(header, HasSubstr("epoch,train_loss"));
  EXPECT_THAT(header, HasSubstr("test_acc,lr"));
  EXPECT_THAT(row, HasSubstr("1,"));
  EXPECT_FALSE(MetricsWriter::Open("/nonexistent/dir/m.csv", false).ok());
}

TEST(MetricsTest, AtomicWriteReplacesTheFile) {
  const std::string path = TestDir() + "/f.txt";
  ASSERT_TRUE(WriteFileAtomically(path, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "two").ok());
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s, "two");
  EXPECT_THAT(std::string(WriteFileAtomically("/nonexistent/x", "a").message()),
              HasSubstr("/nonexistent/x"));
}

TEST(PlotTest, MetricsCsvRoundTripAndSvg) {
  const std::string dir = TestDir();
  {
    auto w = MetricsWriter::Open(dir + "/metrics.csv", false);
    ASSERT_TRUE(w.ok());
    for (int e = 1; e <= 3; ++e) {
      EpochMetrics m;
      m.epoch = e;
      m.train_loss = 1.0 / e;
      m.test_acc = 0.5 + 0.1 * e;
      m.lr = 0.01 / e;
      ASSERT_TRUE(w->Append(m).ok());
    }
  }
  auto rows = ReadMetricsCsv(dir + "/metrics.csv");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[2].epoch, 3);
  EXPECT_NEAR((*rows)[2].test_acc, 0.8, 1e-9);
  ASSERT_TRUE(WritePlots(dir + "/metrics.csv", dir + "/plots.svg").ok());
  std::ifstream in(dir + "/plots.svg");
  std::string svg((std::istreambuf_iterator<char>(in)), {});
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<') > 10, true);
  EXPECT_THAT(svg, HasSubstr("test accuracy"));
  std::ofstream(dir + "/bad.csv") << "epoch\n1,x\n";
  EXPECT_THAT(std::string(ReadMetricsCsv(dir + "/bad.csv").status().message()),
              HasSubstr("bad.csv:2"));
  EXPECT_EQ(RenderSvg({}).find("polyline"), std::string::npos);
}

// ----------------------------------------------------------- loss scaler

TEST(LossScalerTest, BacksOffOnInfAndGrowsAfterCleanInterval) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler s(o);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.Update(/*found_inf=*/true));  // skipped, backed off
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.Update(false));  // third clean step in a row: grows
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_TRUE(s.Update(false));
  EXPECT_FALSE(s.Update(true));  // an inf resets the run of clean steps
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.Restore(8, 2);
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 16);
}

TEST(LossScalerTest, DefaultsAreGradScalers) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.Update(false);
  EXPECT_EQ(s.scale(), 131072.0);
}

// ------------------------------------------------------- checkpoint files

TEST(CheckpointFileTest, RoundTripAndListing) {
  const std::string dir = TestDir() + "/checkpoints";
  for (int64_t key : {1000000, 5, 2000000}) {
    CheckpointBlob b;
    b.key = key;
    b.payload = std::string("state ") + std::to_string(key) + std::string(1, '\0');
    ASSERT_TRUE(SaveCheckpoint(dir, b, key == 5).ok());
  }
  // keep = 2: the oldest numbered one is gone; last and best stay.
  std::vector<std::string> all = ListCheckpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_THAT(all[0], HasSubstr("ckpt_0002000000.ckpt"));
  EXPECT_THAT(all[1], HasSubstr("ckpt_0001000000.ckpt"));
  auto last = ReadCheckpointFile(dir + "/last.ckpt");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->key, 2000000);
  EXPECT_EQ(last->payload, std::string("state 2000000") + std::string(1, '\0'));
  EXPECT_EQ(ReadCheckpointFile(dir + "/best.ckpt")->key, 5);
  EXPECT_TRUE(ListCheckpoints(dir + "/none").empty());
}

TEST(CheckpointFileTest, CorruptOrTruncatedNewestFallsBackToPrevious) {
  const std::string dir = TestDir();
  for (int64_t key : {1, 2}) {
    CheckpointBlob b;
    b.key = key;
    b.payload = std::string(1000, static_cast<char>('a' + key));
    ASSERT_TRUE(SaveCheckpoint(dir, b, false).ok());
  }
  const std::string newest = NumberedCheckpointPath(dir, 2);
  std::string bytes;
  {
    std::ifstream in(newest, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // A flipped byte.
  bytes[bytes.size() - 10] ^= 1;
  std::ofstream(newest, std::ios::binary) << bytes;
  EXPECT_THAT(std::string(ReadCheckpointFile(newest).status().message()),
              HasSubstr("checksum mismatch"));
  std::vector<std::string> skipped;
  auto b = LoadNewestCheckpoint(dir, RunIdentity{}, &skipped);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->key, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("ckpt_0000000002.ckpt"));
  // Truncated, and garbage.
  std::ofstream(newest, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THAT(std::string(ReadCheckpointFile(newest).status().message()),
              HasSubstr("truncated"));
  std::ofstream(newest, std::ios::binary) << "hello\n";
  EXPECT_THAT(std::string(ReadCheckpointFile(newest).status().message()),
              HasSubstr("not a checkpoint"));
  EXPECT_EQ(LoadNewestCheckpoint(dir, RunIdentity{}, nullptr)->key, 1);
  EXPECT_TRUE(absl::IsNotFound(LoadNewestCheckpoint(dir + "/empty", RunIdentity{}, nullptr).status()));
}

}  // namespace
}  // namespace elastrun::trainer
