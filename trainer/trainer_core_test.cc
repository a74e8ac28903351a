// Torch-free parts of the trainer: schedule formulas, sampler index math,
// IDX reading and its errors, flags, metrics, digests.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

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
#include "trainer/temp_files.h"
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

// YOLOv5's schedule at one world size: `ni` iterations of `gb` samples.
absl::StatusOr<YoloV5Schedule> At(const ScheduleOptions& o, int64_t nb, int64_t nbs,
                                  int64_t gb) {
  return YoloV5Schedule::Create(o, 0.01, nbs, YoloV5Schedule::WarmupSamples(o, nb, gb));
}

TEST(ScheduleTest, WarmupLengthIsAtLeast100Iterations) {
  EXPECT_EQ(YoloV5Schedule::WarmupSamples(Hyp(), 469, 128), 1407 * 128);
  EXPECT_EQ(YoloV5Schedule::WarmupSamples(Hyp(), 20, 128), 100 * 128);
  ScheduleOptions o = Hyp();
  o.warmup_epochs = 0.5;
  // round(0.5 * 5) = round(2.5) = 2 in Python; still 100.
  EXPECT_EQ(YoloV5Schedule::WarmupSamples(o, 5, 128), 100 * 128);
  o.warmup_epochs = 2.5;
  // round(2.5 * 101) = round(252.5) = 252 (half to even).
  EXPECT_EQ(YoloV5Schedule::WarmupSamples(o, 101, 128), 252 * 128);
}

TEST(ScheduleTest, CosineAndLinearLrFactors) {
  auto s = At(Hyp(), 469, 64, 64);
  ASSERT_TRUE(s.ok());
  for (int e : {0, 1, 5, 9, 10}) {
    const double want = ((1 - std::cos(e * M_PI / 10)) / 2) * (0.01 - 1) + 1;
    EXPECT_NEAR(s->LrFactor(e), want, 1e-15) << e;
  }
  EXPECT_DOUBLE_EQ(s->LrFactor(0), 1.0);
  EXPECT_NEAR(s->LrFactor(10), 0.01, 1e-15);
  ScheduleOptions o = Hyp();
  o.one_cycle = false;
  auto lin = At(o, 469, 64, 64);
  for (int e : {0, 3, 10}) {
    EXPECT_NEAR(lin->LrFactor(e), (1 - e / 10.0) * (1 - 0.01) + 0.01, 1e-15);
  }
}

TEST(ScheduleTest, WarmupValuesFollowYoloV5Formulas) {
  // nb = 100 -> nw = 300; nbs 64 over a global batch of 16 -> accumulate 4.
  // Without a re-form `seen` is ni x 16: YOLOv5's values at ni.
  constexpr int64_t kGb = 16;
  auto s = At(Hyp(), 100, 64, kGb);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->warmup_samples(), 300 * kGb);
  IterationValues v = s->At(0, 0, kGb);
  EXPECT_DOUBLE_EQ(v.bias_lr, 0.1);
  EXPECT_DOUBLE_EQ(v.lr, 0.0);
  EXPECT_DOUBLE_EQ(v.momentum, 0.8);
  EXPECT_EQ(v.accumulate, 1);
  // ni = 150, epoch 1: halfway; target lr0 * lf(1).
  const double target = 0.01 * s->LrFactor(1);
  v = s->At(150 * kGb, 1, kGb);
  EXPECT_NEAR(v.bias_lr, 0.1 + 0.5 * (target - 0.1), 1e-15);
  EXPECT_NEAR(v.lr, 0.5 * target, 1e-15);
  EXPECT_NEAR(v.momentum, 0.8 + 0.5 * (0.937 - 0.8), 1e-15);
  EXPECT_EQ(v.accumulate, 2);  // round(interp = 2.5) = 2, half to even
  v = s->At(60 * kGb, 0, kGb);
  EXPECT_EQ(v.accumulate, 2);  // round(1 + 0.2 * 3 = 1.6)
  EXPECT_NEAR(v.lr, 0.2 * 0.01, 1e-15);
  v = s->At(300 * kGb, 2, kGb);  // the last warm-up iteration reaches the targets
  EXPECT_NEAR(v.lr, 0.01 * s->LrFactor(2), 1e-15);
  EXPECT_NEAR(v.bias_lr, 0.01 * s->LrFactor(2), 1e-15);
  EXPECT_DOUBLE_EQ(v.momentum, 0.937);
  EXPECT_EQ(v.accumulate, 4);
  v = s->At(750 * kGb, 7, kGb);  // after warm-up
  EXPECT_DOUBLE_EQ(v.lr, 0.01 * s->LrFactor(7));
  EXPECT_DOUBLE_EQ(v.bias_lr, v.lr);
  EXPECT_DOUBLE_EQ(v.momentum, 0.937);
  EXPECT_EQ(v.accumulate, 4);
}

// The lr, bias lr and momentum at a sample do not depend on the world
// size; the accumulation keeps the nominal batch for the world's global
// batch, as YOLOv5's round(nbs / gb).
TEST(ScheduleTest, AReFormKeepsTheLrAndTheNominalBatch) {
  auto s = At(Hyp(), 100, 64, 32);  // The run started on 2 ranks x 16.
  ASSERT_TRUE(s.ok());
  for (int64_t seen : {int64_t{0}, int64_t{1000}, int64_t{4800}, int64_t{9600},
                       int64_t{20000}}) {
    const IterationValues two = s->At(seen, 2, 32);
    for (int64_t gb : {16, 48, 64, 128}) {
      const IterationValues other = s->At(seen, 2, gb);
      EXPECT_EQ(other.lr, two.lr) << seen << " " << gb;
      EXPECT_EQ(other.bias_lr, two.bias_lr) << seen << " " << gb;
      EXPECT_EQ(other.momentum, two.momentum) << seen << " " << gb;
    }
  }
  EXPECT_EQ(s->At(20000, 5, 32).accumulate, 2);
  EXPECT_EQ(s->At(20000, 5, 16).accumulate, 4);
  EXPECT_EQ(s->At(20000, 5, 48).accumulate, 1);  // round(1.33)
  EXPECT_EQ(s->At(20000, 5, 128).accumulate, 1);
}

TEST(ScheduleTest, AccumulationAndWeightDecayScaling) {
  // Global batch 128 > nbs 64: accumulate max(round(0.5), 1) = 1, decay x2.
  auto s = At(Hyp(), 10, 64, 128);
  EXPECT_EQ(s->Accumulate(128), 1);
  EXPECT_DOUBLE_EQ(s->ScaledWeightDecay(0.0005, 128), 0.001);
  // Global batch 24: accumulate round(2.667) = 3, decay * 24 * 3 / 64.
  EXPECT_EQ(s->Accumulate(24), 3);
  EXPECT_DOUBLE_EQ(s->ScaledWeightDecay(0.0005, 24), 0.0005 * 72 / 64);
}

TEST(ScheduleTest, RejectsBadSizes) {
  EXPECT_FALSE(YoloV5Schedule::Create(Hyp(), 0.01, 0, 6400).ok());
  ScheduleOptions o = Hyp();
  o.epochs = 0;
  EXPECT_THAT(std::string(YoloV5Schedule::Create(o, 0.01, 64, 6400).status().message()),
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

TEST(SamplerTest, ResumeAtTheSameWorldSizeContinuesTheShards) {
  for (int64_t n : {20, 21, 23}) {
    auto s = DistributedSampler::Create(n, 2, 1, {}, Reverse);
    s->set_epoch(1);
    const std::vector<int64_t> all = s->Indices();
    // After 2 batches of 2 on each of the 2 ranks: position 8.
    EXPECT_EQ(s->Advance(0, 4), 8);
    const std::vector<int64_t> rest = s->Indices(8);
    ASSERT_EQ(rest.size(), all.size() - 4) << n;
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + 4)) << n;
    EXPECT_TRUE(s->Indices(n).empty());
    EXPECT_EQ(s->Advance(0, s->num_samples()), n) << "the padding is no position";
  }
}

// One epoch of `n` samples trained in three parts at world sizes
// `worlds`, re-forming after 2 optimizer steps of `accumulate` batches of
// `batch` per rank (states are taken at steps), the last part to the end:
// each part's shards are dealt from the position the one before reached.
// Checks that each batch over all ranks is the next block of the order,
// and returns every sample trained (padding left out).
std::multiset<int64_t> TrainInParts(int64_t n, int64_t batch, int accumulate,
                                    const std::array<int, 3>& worlds, bool drop_last) {
  SamplerOptions o;
  o.drop_last = drop_last;
  std::multiset<int64_t> trained;
  int64_t done = 0;
  for (size_t part = 0; part < worlds.size() && done < n; ++part) {
    const int w = worlds[part];
    std::vector<std::vector<int64_t>> shards;
    for (int r = 0; r < w; ++r) {
      auto s = DistributedSampler::Create(n, w, r, o, Reverse);
      EXPECT_TRUE(s.ok());
      if (!s.ok()) return trained;
      s->set_epoch(2);
      shards.push_back(s->Indices(done));
      EXPECT_EQ(static_cast<int64_t>(shards.back().size()), s->ShardSize(done));
    }
    auto s = DistributedSampler::Create(n, w, 0, o, Reverse);
    s->set_epoch(2);
    const std::vector<int64_t> order = s->GlobalOrder(0);
    const int64_t per_rank = static_cast<int64_t>(shards[0].size());
    const int64_t count =
        part + 1 == worlds.size() ? per_rank : std::min<int64_t>(2 * accumulate * batch, per_rank);
    for (int64_t b = 0; b < count; b += batch) {
      // This batch over all ranks: the next block of the order (or, at the
      // epoch's end, its rest and padding from the order's head).
      std::vector<int64_t> block;
      for (int64_t j = b; j < std::min(count, b + batch); ++j) {
        for (int r = 0; r < w; ++r) block.push_back(shards[r][j]);
      }
      std::sort(block.begin(), block.end());
      const int64_t from = s->Advance(done, b);
      std::vector<int64_t> want(
          order.begin() + from,
          order.begin() + std::min<int64_t>(n, from + static_cast<int64_t>(block.size())));
      std::sort(want.begin(), want.end());
      if (!drop_last && from + static_cast<int64_t>(block.size()) > n) {
        EXPECT_TRUE(std::includes(block.begin(), block.end(), want.begin(), want.end()));
      } else {
        EXPECT_EQ(block, want) << "batch " << b / batch << " of part " << part;
      }
    }
    const int64_t next = s->Advance(done, count);
    for (int r = 0; r < w; ++r) {
      for (int64_t j = 0; j < count; ++j) {
        if (done + j * w + r < next) trained.insert(shards[r][j]);  // Not padding.
      }
    }
    done = next;
  }
  EXPECT_TRUE(drop_last || done == n);
  return trained;
}

// The position arithmetic over many (old world, new world, batch,
// accumulation) changes, drop_last or not: the new shards are disjoint,
// their union is exactly the rest of the epoch (plus the padding of the
// last batch), and each batch over all ranks is the next block of the
// order. Two re-forms in one epoch: every sample once in all.
TEST(SamplerTest, ReFormsAtAnyWorldSizeTrainEverySampleOnce) {
  for (bool drop_last : {false, true}) {
    for (int64_t n : {37, 64, 96, 101}) {
      for (int64_t batch : {1, 3, 8}) {
        for (int accumulate : {1, 3}) {
          for (int w0 : {1, 2, 3, 4}) {
            for (int w1 : {1, 2, 3, 5}) {
              for (int w2 : {1, 2, 4}) {
                SCOPED_TRACE(::testing::Message()
                             << "n=" << n << " batch=" << batch << " accumulate=" << accumulate
                             << " worlds " << w0 << "," << w1 << "," << w2
                             << " drop_last=" << drop_last);
                const std::multiset<int64_t> trained =
                    TrainInParts(n, batch, accumulate, {w0, w1, w2}, drop_last);
                const std::set<int64_t> distinct(trained.begin(), trained.end());
                EXPECT_EQ(distinct.size(), trained.size()) << "a sample trained twice";
                if (!drop_last) {
                  EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << "a sample skipped";
                }
              }
            }
          }
        }
      }
    }
  }
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
  EXPECT_THAT(all[0], HasSubstr("ckpt_0000000000002000000.ckpt"));
  EXPECT_THAT(all[1], HasSubstr("ckpt_0000000000001000000.ckpt"));
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
  EXPECT_THAT(skipped[0], HasSubstr("ckpt_0000000000000000002.ckpt"));
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

// Nodes that share an output folder write the same checkpoint (same key,
// same run) at about the same time: when last.ckpt already names the very
// file a writer links, its rename does nothing, and its temporary link must
// not stay behind.
TEST(CheckpointFileTest, WritersSharingAFolderLeaveNoLinks) {
  const std::string dir = TestDir() + "/checkpoints";
  CheckpointBlob blob;
  blob.run = RunIdentity{"shared", "digest"};
  blob.payload = std::string(4096, 'w');
  auto writer = [&] {
    for (int i = 0; i < 300; ++i) {
      // Every writer writes the same keys, in the same order.
      CheckpointBlob mine = blob;
      mine.key = i / 3;
      EXPECT_TRUE(SaveCheckpoint(dir, mine, /*best=*/true).ok());
    }
  };
  std::thread a(writer), b(writer);
  a.join();
  b.join();
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".link."), std::string::npos) << name << " was left behind";
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name << " was left behind";
  }
  EXPECT_TRUE(ReadCheckpointFile(dir + "/last.ckpt").ok());
}

// ------------------------------------------------- temporaries, progress

TEST(TempFilesTest, NamesAreUniquePerWriterAndHost) {
  const std::string a = TemporaryName("/x/last.ckpt", "link");
  const std::string b = TemporaryName("/x/last.ckpt", "link");
  EXPECT_NE(a, b);
  EXPECT_THAT(a, ::testing::StartsWith("/x/last.ckpt.link." + HostToken() + "-" +
                                       std::to_string(getpid()) + "-"));
  EXPECT_THAT(HostToken(), ::testing::MatchesRegex("[A-Za-z0-9_-]+~[0-9a-f]{8}"));
}

// A writer killed mid-write (a partial checkpoint, a link never renamed)
// leaves its temporary behind: the next start removes this host's dead
// writers' at once and others' once old; live writers' and other files
// stay.
TEST(TempFilesTest, DeadWritersTemporariesAreRemoved) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir();
  auto touch = [&](const std::string& name) {
    std::ofstream(dir + "/" + name) << std::string(1000, 'x');
    return dir + "/" + name;
  };
  // A real writer that dies: a child process makes its temporaries and is
  // killed before renaming them.
  const pid_t child = fork();
  if (child == 0) {
    std::ofstream(TemporaryName(dir + "/ckpt_1.ckpt", "tmp")) << std::string(1000, 'x');
    std::ofstream(TemporaryName(dir + "/last.ckpt", "link")) << "x";
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const std::string live = TemporaryName(dir + "/metrics.csv", "tmp");
  std::ofstream(live) << "a writer still at work";
  const std::string other_recent = touch("best.ckpt.link.otherhost~0badcafe-77-00ff");
  const std::string other_old = touch("last.ckpt.tmp.otherhost~0badcafe-78-00ff");
  const std::string legacy_old = touch("metrics.csv.tmp.4242.3");
  const std::string keep = touch("ckpt_0000000000000000001_ab.ckpt");
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(other_old, two_hours_ago);
  fs::last_write_time(legacy_old, two_hours_ago);

  const std::vector<std::string> removed = RemoveStaleTemporaries(dir);
  EXPECT_EQ(removed.size(), 4u) << ::testing::PrintToString(removed);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().string());
  std::sort(left.begin(), left.end());
  std::vector<std::string> want = {live, other_recent, keep};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(left, want);
  EXPECT_THAT(::testing::PrintToString(removed), HasSubstr("(1000 bytes)"));
  EXPECT_TRUE(RemoveStaleTemporaries(dir + "/missing").empty());
}

// After a resume mid-epoch, the rate and ETA count only the iterations
// this process trained.
TEST(ProgressTest, RateAndEtaCountOnlyTheIterationsSinceTheStart) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  Progress p(out, /*tty=*/false, /*log_period=*/5);
  // Resumed at iteration 90 of 100; 5 iterations in 1 s.
  p.Update(0, 1, 94, 90, 100, 0.5, 0.01, 1.0);
  std::fclose(out);
  const std::string line(text, size);
  std::free(text);
  EXPECT_THAT(line, HasSubstr("iter 95/100"));
  EXPECT_THAT(line, HasSubstr("5.0 it/s eta 1s")) << line;
}

}  // namespace
}  // namespace elastrun::trainer
