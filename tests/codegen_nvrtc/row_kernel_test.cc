#include "codegen_nvrtc/row_kernel.h"

#include <algorithm>

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "common/status_macros.h"
#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "../support/text.h"

namespace torchfuse::codegen {
namespace {

// The body of the single fusion group that the pipeline makes of `text`.
class RowKernelTest : public ::testing::Test {
 protected:
  const graph::Graph& Body(const std::string& text) {
    auto g = graph::ParseGraph(text);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(fusion::RunFusionPipeline(g->get()).ok());
    graph_ = std::move(*g);
    for (const auto& n : graph_->nodes()) {
      if (n->kind() == graph::OpKind::kFusionGroup) return *n->body();
    }
    ADD_FAILURE() << "no group in\n" << graph::PrintGraph(*graph_);
    return *graph_;
  }

  static std::vector<TensorView> Contiguous(const graph::Graph& body, uintptr_t address = 256) {
    std::vector<TensorView> views;
    for (const auto& in : body.inputs()) {
      const std::vector<int64_t>& sizes = in->type().sizes;
      std::vector<int64_t> strides(sizes.size(), 1);
      for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k) {
        strides[k] = strides[k + 1] * sizes[k + 1];
      }
      views.push_back({sizes, strides, address, graph::DTypeSize(in->type().dtype)});
    }
    return views;
  }

  // The block-strategy kernel of the group the pipeline makes of `text` (contiguous inputs).
  absl::StatusOr<KernelSource> BlockKernel(const std::string& text, int64_t row_length,
                                           int64_t rows) {
    const graph::Graph& body = Body(text);
    TF_ASSIGN_OR_RETURN(RowIndexing ix, AnalyzeRowIndexing(body));
    RowLaunch l = Launch(body, ix, Contiguous(body));
    const RowVariant v =
        ChooseRowVariant(row_length, l.layout.vec, rows, {90, 132}, RowStrategy::kBlock);
    return EmitRowKernel(body, ix, l.layout, v, "t");
  }

  // The group the pipeline makes of `text` (contiguous inputs): its indexing, launch and its
  // kernel in variant `v`.
  struct Emitted {
    const graph::Graph* body = nullptr;
    RowIndexing ix;
    RowLaunch launch;
    absl::StatusOr<KernelSource> src = absl::UnknownError("not emitted");
  };
  Emitted Emit(const std::string& text, const RowVariant& v) {
    Emitted e;
    e.body = &Body(text);
    absl::StatusOr<RowIndexing> ix = AnalyzeRowIndexing(*e.body);
    if (!ix.ok()) {
      e.src = ix.status();
      return e;
    }
    e.ix = std::move(*ix);
    e.launch = Launch(*e.body, e.ix, Contiguous(*e.body));
    e.src = EmitRowKernel(*e.body, e.ix, e.launch.layout, v, "t");
    return e;
  }

  static RowLaunch Launch(const graph::Graph& body, const RowIndexing& ix,
                          const std::vector<TensorView>& views) {
    std::vector<int> sizes;
    for (const auto* v : body.outputs()) sizes.push_back(graph::DTypeSize(v->type().dtype));
    return ComputeRowLaunch(ix, views, sizes, std::vector<uintptr_t>(sizes.size(), 256));
  }

  std::unique_ptr<graph::Graph> graph_;
};

std::string Softmax(const std::string& dtype, const std::string& shape) {
  return "graph(%x: " + dtype + "[" + shape + "]) {\n  %y: " + dtype + "[" + shape +
         "] = softmax(%x) {dim=-1}\n  return(%y)\n}\n";
}

std::string LayerNorm(const std::string& dtype, int64_t rows, int64_t n) {
  const std::string x = dtype + "[" + std::to_string(rows) + "," + std::to_string(n) + "]";
  const std::string w = dtype + "[" + std::to_string(n) + "]";
  return "graph(%x: " + x + ") {\n  %w: " + w + " = param() {name=\"w\"}\n  %b: " + w +
         " = param() {name=\"b\"}\n  %y: " + x +
         " = layer_norm(%x, %w, %b) {eps=1e-05, normalized_ndim=1}\n  return(%y)\n}\n";
}

// GPT-2's vocabulary log_softmax: bf16 logits, f32 rows of 50257.
std::string VocabLogSoftmax() {
  return "graph(%x: bf16[64,50257]) {\n  %c: f32[64,50257] = cast(%x) {dtype=\"f32\"}\n"
         "  %y: f32[64,50257] = log_softmax(%c) {dim=-1}\n  return(%y)\n}\n";
}

// Per-row outputs (keepdim and not) next to an element output.
std::string Stats(const std::string& dtype) {
  return "graph(%x: " + dtype + "[6,100]) {\n"
         "  %s: " + dtype + "[6] = sum(%x) {dims=[-1], keepdim=0}\n"
         "  %m: " + dtype + "[6,1] = amin(%x) {dims=[-1], keepdim=1}\n"
         "  %d: " + dtype + "[6,100] = sub(%x, %m)\n"
         "  return(%s, %m, %d)\n}\n";
}

TEST_F(RowKernelTest, SoftmaxHasTwoLevelsAndAnOnlinePair) {
  const graph::Graph& body = Body(Softmax("f32", "64,1024"));
  auto ix = AnalyzeRowIndexing(body);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ix->row_length, 1024);
  EXPECT_EQ(ix->levels, 2);
  ASSERT_EQ(ix->reductions.size(), 2u);
  EXPECT_EQ(ix->reductions[0].node->kind(), graph::OpKind::kAmax);
  EXPECT_EQ(ix->reductions[1].online_partner, 0);
  ASSERT_EQ(ix->sites.size(), 1u);
  EXPECT_FALSE(ix->site_per_row[0]);
  EXPECT_EQ(ix->output_per_row, std::vector<bool>{false});
}

TEST_F(RowKernelTest, LayerNormParametersAreElementSitesSharedByRows) {
  const graph::Graph& body = Body(LayerNorm("bf16", 32, 768));
  auto ix = AnalyzeRowIndexing(body);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ix->levels, 2);  // mean, then the mean of squared deviations
  RowLaunch l = Launch(body, *ix, Contiguous(body));
  EXPECT_EQ(l.rows, 32);
  EXPECT_EQ(l.layout.vec, 8);
  EXPECT_EQ(l.layout.outer_rank, 1);
  for (size_t s = 0; s < ix->sites.size(); ++s) {
    EXPECT_EQ(l.layout.access[s], RowAccess::kContiguous);
    const bool param = ix->sites[s].input != 0;
    EXPECT_EQ(l.site_strides[s][0], param ? 0 : 768) << s;
  }
}

TEST_F(RowKernelTest, LaunchCollapsesOuterDimsAndFallsBackToScalarAccess) {
  const graph::Graph& body = Body(Softmax("f32", "4,8,100"));
  auto ix = AnalyzeRowIndexing(body);
  ASSERT_TRUE(ix.ok()) << ix.status();
  RowLaunch contiguous = Launch(body, *ix, Contiguous(body));
  EXPECT_EQ(contiguous.rows, 32);
  EXPECT_EQ(contiguous.outer_sizes, std::vector<int64_t>{32});
  EXPECT_EQ(contiguous.layout.vec, 4);
  // Rows 104 apart (a slice of a wider tensor): still one outer dim, row stride 104.
  std::vector<TensorView> sliced = {{{4, 8, 100}, {832, 104, 1}, 256, 4}};
  RowLaunch s = Launch(body, *ix, sliced);
  EXPECT_EQ(s.site_strides[0], (std::vector<int64_t>{104, 1}));
  EXPECT_EQ(s.layout.vec, 4);
  // Misaligned: scalar access.
  std::vector<TensorView> misaligned = {{{4, 8, 100}, {800, 100, 1}, 260, 4}};
  EXPECT_EQ(Launch(body, *ix, misaligned).layout.vec, 1);
  // Transposed inner dim: strided.
  std::vector<TensorView> transposed = {{{4, 8, 100}, {800, 1, 8}, 256, 4}};
  RowLaunch t = Launch(body, *ix, transposed);
  EXPECT_EQ(t.layout.access[0], RowAccess::kStrided);
  EXPECT_EQ(t.layout.vec, 1);
  EXPECT_EQ(t.layout.outer_rank, 2);  // dims of strides 800 and 1 do not merge
}

TEST_F(RowKernelTest, ReducedValueBroadcastAlongTheRowIsRejected) {
  // sum over the rows of a [4,4] tensor, broadcast as a row vector: not per row.
  auto g = graph::ParseGraph(R"(graph(%x: f32[4,4]) {
      %s: f32[4] = sum(%x) {dims=[-1], keepdim=0}
      %y: f32[4,4] = add(%x, %s)
      return(%y)
    })");
  ASSERT_TRUE(g.ok());
  auto ix = AnalyzeRowIndexing(**g);
  ASSERT_FALSE(ix.ok());
  EXPECT_NE(ix.status().message().find("broadcast"), std::string::npos) << ix.status();
}

TEST_F(RowKernelTest, HeuristicPicksByRowLengthAndForcedStrategiesFallBack) {
  const RowDevice h100{90, 132};
  const RowDevice a100{80, 108};
  EXPECT_EQ(ChooseRowVariant(256, 4, 4096, h100).strategy, RowStrategy::kWarp);
  EXPECT_EQ(ChooseRowVariant(4096, 4, 4096, h100).strategy, RowStrategy::kBlock);
  EXPECT_EQ(ChooseRowVariant(65536, 4, 1024, h100).strategy, RowStrategy::kCluster);
  EXPECT_EQ(ChooseRowVariant(65536, 4, 1024, a100).strategy, RowStrategy::kLooped);
  EXPECT_EQ(ChooseRowVariant(65536, 8, 8, h100).strategy, RowStrategy::kCluster);
  // A row that 512 threads hold in 16 chunks each: 1024 threads of 8 (bf16 65536).
  const RowVariant wide = ChooseRowVariant(65536, 8, 1024, h100);
  EXPECT_EQ(wide.strategy, RowStrategy::kBlock);
  EXPECT_EQ(wide.threads, 1024);
  EXPECT_EQ(wide.ChunksPerThread(65536, 8), 8);
  // One that 512 threads hold in 8 (f32 16384): 1024 threads of 2 chunks a step, its second
  // read kept in L2; a block of 512 before sm_80, which has no L2 hints.
  const RowVariant f32_16k = ChooseRowVariant(16384, 4, 4096, h100);
  EXPECT_EQ(f32_16k.Signature(), "looped_t1024_u2_l2");
  EXPECT_EQ(ChooseRowVariant(16384, 4, 4096, RowDevice{75, 40}).Signature(), "block_t512");
  // One chunk fewer a thread stays in registers (f32 12288: 6 chunks of 512 threads).
  EXPECT_EQ(ChooseRowVariant(12288, 4, 4096, h100).Signature(), "block_t512");
  // Rows read element by element keep ~16 elements a thread: 64 threads for 1001, 256 for
  // 4096 (16 chunks of one element, not 1024 threads of 4).
  EXPECT_EQ(ChooseRowVariant(1001, 1, 4096, h100).threads, 64);
  EXPECT_EQ(ChooseRowVariant(4096, 1, 4096, h100).threads, 256);
  EXPECT_EQ(ChooseRowVariant(1 << 22, 4, 8, h100).strategy, RowStrategy::kLooped);
  EXPECT_EQ(ChooseRowVariant(1000, 4, 7, a100, RowStrategy::kCluster).strategy,
            RowStrategy::kLooped);
  EXPECT_EQ(ChooseRowVariant(65536, 4, 7, h100, RowStrategy::kWarp).strategy,
            RowStrategy::kLooped);
  const RowVariant warp = ChooseRowVariant(1, 1, 3000, h100, RowStrategy::kWarp);
  EXPECT_EQ(warp.threads, 1);
  EXPECT_EQ(warp.GridSize(3000), (3000 + warp.rows_per_block - 1) / warp.rows_per_block);
  for (int64_t n : {1, 7, 1000, 4096, 65536}) {
    for (RowStrategy s : {RowStrategy::kWarp, RowStrategy::kBlock, RowStrategy::kCluster}) {
      RowVariant v = ChooseRowVariant(n, 1, 16, h100, s);
      if (v.strategy != RowStrategy::kLooped) {
        EXPECT_LE(v.ChunksPerThread(n, 1), kMaxRowChunksPerThread) << n;
        EXPECT_GE(int64_t{v.ChunksPerThread(n, 1)} * v.threads * v.cluster, n) << n;
      }
    }
  }
}

// The signatures of the tuner's space for `rows` rows of `n` elements in vectors of `vec` on an
// H100, the heuristic's first; every variant fits, and none but the heuristic's idles.
std::vector<std::string> SpaceSignatures(int64_t n, int vec, int64_t rows = 8192) {
  const RowDevice h100{90, 132};
  std::vector<std::string> s;
  const std::vector<RowVariant> space = RowVariantSpace(n, vec, rows, h100);
  for (size_t i = 0; i < space.size(); ++i) {
    EXPECT_TRUE(RowVariantFits(space[i], n, vec, h100)) << space[i].Signature();
    if (i > 0) {
      EXPECT_FALSE(RowVariantIdles(space[i], n, vec)) << space[i].Signature();
    }
    s.push_back(space[i].Signature());
  }
  return s;
}

bool Has(const std::vector<std::string>& s, const std::string& v) {
  return std::find(s.begin(), s.end(), v) != s.end();
}

// The tuner's space: L2-hinted looped variants for rows of 4096 elements or more, whose later
// passes may miss L2 (a vocabulary row, a 16384-long f32 softmax row), each step within a row;
// none for shorter rows, and no staged ones.
TEST_F(RowKernelTest, TheSpaceHasL2HintedLoopedVariantsForLongRowsOnly) {
  // Vocabulary rows in every vector width: bf16 to bf16 (8), to f32 (4), element by element.
  for (int vec : {1, 4, 8}) {
    const std::vector<std::string> vocab = SpaceSignatures(50257, vec, 4096);
    EXPECT_TRUE(Has(vocab, "looped_t1024_u2_l2")) << vec;
    EXPECT_TRUE(Has(vocab, "looped_t1024_u4_l2")) << vec;
    EXPECT_TRUE(Has(vocab, "looped_t512_u4_l2")) << vec;
    EXPECT_TRUE(Has(vocab, "looped_t512_u1_l2")) << vec;
    EXPECT_TRUE(Has(vocab, "looped_t512_u1")) << vec;
  }
  const std::vector<std::string> f32_16k = SpaceSignatures(16384, 4, 4096);
  EXPECT_EQ(f32_16k.front(), "looped_t1024_u2_l2");  // the heuristic's, timed first
  EXPECT_TRUE(Has(f32_16k, "block_t512"));          // the row in registers, timed against it
  EXPECT_TRUE(Has(f32_16k, "looped_t512_u4_l2"));
  EXPECT_TRUE(Has(f32_16k, "looped_t1024_u4_l2"));  // a step of the whole row
  EXPECT_FALSE(Has(f32_16k, "looped_t512_u1_l2"));  // the single-chunk step: vocabulary rows
  const std::vector<std::string> f32_4k = SpaceSignatures(4096, 4, 8192);  // 1024 chunks
  EXPECT_TRUE(Has(f32_4k, "looped_t512_u2_l2"));
  EXPECT_TRUE(Has(f32_4k, "looped_t256_u2_l2"));
  EXPECT_FALSE(Has(f32_4k, "looped_t512_u4_l2"));  // a step of 2048 chunks
  EXPECT_FALSE(Has(f32_4k, "looped_t1024_u2_l2"));
  const std::vector<std::string> bf16_4k = SpaceSignatures(4096, 8, 8192);  // 512 chunks
  EXPECT_TRUE(Has(bf16_4k, "looped_t256_u2_l2"));
  EXPECT_FALSE(Has(bf16_4k, "looped_t512_u2_l2"));
  EXPECT_FALSE(Has(SpaceSignatures(16384, 8, 4096), "looped_t1024_u4_l2"));  // 2048 chunks
  for (const auto& [n, vec] : {std::pair<int64_t, int>{4095, 1}, {2048, 4}, {1000, 4}}) {
    for (const std::string& s : SpaceSignatures(n, vec, 4096)) {
      EXPECT_EQ(s.find("_l2"), std::string::npos) << n << " " << s;
    }
  }
  for (const auto& [n, vec] : {std::pair<int64_t, int>{50257, 8}, {16384, 4}, {4096, 8}}) {
    for (const std::string& s : SpaceSignatures(n, vec, 4096)) {
      EXPECT_EQ(s.find("_sm"), std::string::npos) << n << " " << s;
    }
  }
}

// Variants with so many threads that half of them would hold the row at one chunk each are
// left out of the tuner's space (the same bytes as half the threads, idle threads in every
// reduction): rows of 512 chunks or fewer lose them, longer rows keep every block and looped
// size, and clusters of at least half the row's chunks in threads.
TEST_F(RowKernelTest, TheSpaceLeavesOutVariantsWhoseThreadsIdle) {
  // A bf16 row of 768 (a transformer's hidden size): 96 chunks of 8.
  const std::vector<std::string> bf16_768 = SpaceSignatures(768, 8);
  EXPECT_TRUE(Has(bf16_768, "block_t64"));
  EXPECT_TRUE(Has(bf16_768, "block_t128"));
  EXPECT_FALSE(Has(bf16_768, "block_t256"));  // 128 threads already hold the row
  EXPECT_FALSE(Has(bf16_768, "block_t1024_nokeep"));
  EXPECT_TRUE(Has(bf16_768, "warp_t32_r4"));
  for (const std::string& v : bf16_768) EXPECT_EQ(v.find("looped"), std::string::npos) << v;
  // A row of 12 chunks (ConvNeXt's first stage, 96 channels in bf16): the smallest sizes only.
  const std::vector<std::string> tiny = SpaceSignatures(96, 8);
  EXPECT_TRUE(Has(tiny, "block_t64"));
  EXPECT_TRUE(Has(tiny, "warp_t4_r32"));
  EXPECT_TRUE(Has(tiny, "warp_t16_r8"));
  EXPECT_FALSE(Has(tiny, "warp_t32_r4"));  // 16 lanes hold the 12 chunks
  EXPECT_FALSE(Has(tiny, "block_t128"));
  EXPECT_LE(tiny.size(), 6u);
  // 512 chunks: only the 1024-thread sizes go.
  const std::vector<std::string> bf16_4k = SpaceSignatures(4096, 8);
  EXPECT_TRUE(Has(bf16_4k, "block_t512"));
  EXPECT_TRUE(Has(bf16_4k, "block_t512_nokeep"));
  EXPECT_FALSE(Has(bf16_4k, "block_t1024"));
  EXPECT_FALSE(Has(bf16_4k, "looped_t1024_u2"));
  EXPECT_TRUE(Has(bf16_4k, "looped_t512_u1"));
  // Past 512 chunks every size stays.
  for (const auto& [n, vec] : {std::pair<int64_t, int>{4096, 4}, {16384, 8}, {65536, 8}}) {
    const std::vector<std::string> long_row = SpaceSignatures(n, vec);
    for (const std::string& v : std::vector<std::string>{"block_t1024", "block_t1024_nokeep",
                                                         "looped_t1024_u2", "looped_t256_u2"}) {
      EXPECT_TRUE(Has(long_row, v)) << n << " " << vec << " " << v;
    }
  }
  RowVariant block;
  block.strategy = RowStrategy::kBlock;
  block.threads = 64;
  EXPECT_FALSE(RowVariantIdles(block, 1, 1));  // the smallest block, whatever the row
  block.threads = 128;
  EXPECT_TRUE(RowVariantIdles(block, 64, 1));
  EXPECT_FALSE(RowVariantIdles(block, 65, 1));
  block.threads = 1024;
  EXPECT_TRUE(RowVariantIdles(block, 512 * 8, 8));
  EXPECT_FALSE(RowVariantIdles(block, 513 * 8, 8));
  RowVariant cluster;
  cluster.strategy = RowStrategy::kCluster;
  cluster.threads = 512;
  cluster.cluster = 2;
  EXPECT_TRUE(RowVariantIdles(cluster, 512, 1));  // 1024 threads, 512 chunks
  EXPECT_FALSE(RowVariantIdles(cluster, 513, 1));
  // An f32 row of 4096 (1024 chunks): clusters of 1024 threads or fewer in all stay.
  const std::vector<std::string> f32_4k = SpaceSignatures(4096, 4);
  EXPECT_TRUE(Has(f32_4k, "cluster_t256_c2"));
  EXPECT_TRUE(Has(f32_4k, "cluster_t256_c4"));
  EXPECT_TRUE(Has(f32_4k, "cluster_t512_c2"));
  EXPECT_FALSE(Has(f32_4k, "cluster_t256_c8"));
  EXPECT_FALSE(Has(f32_4k, "cluster_t512_c4"));
  EXPECT_TRUE(Has(SpaceSignatures(65536, 8), "cluster_t512_c8"));  // 8192 chunks
}

struct CompileCase {
  std::string text;
  std::vector<int64_t> row_counts;
};

TEST_F(RowKernelTest, NvrtcCompilesEveryStrategyAndDtype) {
  const std::vector<std::string> dtypes = {"f32", "f16", "bf16", "f64"};
  int compiled = 0;
  for (const std::string& dt : dtypes) {
    for (const std::string& text :
         {Softmax(dt, "7,1000"), Softmax(dt, "3,65536"), LayerNorm(dt, 16, 768), Stats(dt),
          Softmax(dt, "5,1")}) {
      const graph::Graph& body = Body(text);
      auto ix = AnalyzeRowIndexing(body);
      ASSERT_TRUE(ix.ok()) << ix.status() << "\n" << text;
      for (bool transposed : {false, true}) {
        std::vector<TensorView> views = Contiguous(body);
        if (transposed) std::swap(views[0].strides[0], views[0].strides.back());
        RowLaunch l = Launch(body, *ix, views);
        for (RowStrategy s : {RowStrategy::kWarp, RowStrategy::kBlock, RowStrategy::kLooped,
                              RowStrategy::kCluster}) {
          const RowVariant v = ChooseRowVariant(ix->row_length, l.layout.vec, l.rows, {90, 132}, s);
          auto src = EmitRowKernel(body, *ix, l.layout, v, "t");
          ASSERT_TRUE(src.ok()) << src.status();
          EXPECT_NE(src->name.find(RowStrategyName(v.strategy)), std::string::npos);
          auto image = CompileCuda(src->source, src->name, 90);
          ASSERT_TRUE(image.ok()) << image.status() << "\n" << text << " " << v.Signature();
          ++compiled;
        }
      }
    }
  }
  EXPECT_EQ(compiled, 4 * 5 * 2 * 4);
}

// Rows whose length the vector width does not divide (a vocabulary of 50257): each row's
// vectors are aligned to memory, with a partial vector at either end.
TEST_F(RowKernelTest, RowsVectorsDoNotDivideAreReadInVectorsAlignedToMemory) {
  {
    const graph::Graph& body = Body(VocabLogSoftmax());
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok()) << ix.status();
    RowLaunch l = Launch(body, *ix, Contiguous(body));
    EXPECT_EQ(l.layout.vec, 4);  // the f32 output's 16 bytes
    EXPECT_TRUE(l.layout.shifted);
    EXPECT_EQ(l.layout.access, std::vector<RowAccess>{RowAccess::kContiguous});
    EXPECT_EQ(l.layout.ChunkSpan(50257), 50260);
    EXPECT_NE(l.layout.Signature().find("_v4s_"), std::string::npos) << l.layout.Signature();
    // A base that is not a vector's: no site shares the outputs' vectors, scalar access.
    std::vector<TensorView> misaligned = Contiguous(body, 258);
    EXPECT_EQ(Launch(body, *ix, misaligned).layout.vec, 1);
    EXPECT_FALSE(Launch(body, *ix, misaligned).layout.shifted);
    int compiled = 0;
    for (RowStrategy s : {RowStrategy::kWarp, RowStrategy::kBlock, RowStrategy::kLooped,
                          RowStrategy::kCluster}) {
      const RowVariant v =
          ChooseRowVariant(l.layout.ChunkSpan(50257), l.layout.vec, l.rows, {90, 132}, s);
      auto src = EmitRowKernel(body, *ix, l.layout, v, "t");
      ASSERT_TRUE(src.ok()) << src.status();
      // Whole vectors inside the row, elements at its ends.
      EXPECT_NE(src->source.find("if (full) l0[k] = *reinterpret_cast<const TfVec<tf_bf16, 4>*>"),
                std::string::npos) << src->source;
      EXPECT_NE(src->source.find("if (full) *reinterpret_cast<TfVec<float, 4>*>"), std::string::npos);
      auto image = CompileCuda(src->source, src->name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << "\n" << v.Signature();
      ++compiled;
    }
    EXPECT_EQ(compiled, 4);
  }
  {
    // Layer norm over 1001: x shares the outputs' vectors; the weight and bias (the same
    // elements for every row, outer stride 0) do not, and are read element by element.
    const graph::Graph& body = Body(LayerNorm("f32", 16, 1001));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok()) << ix.status();
    RowLaunch l = Launch(body, *ix, Contiguous(body));
    EXPECT_EQ(l.layout.vec, 4);
    EXPECT_TRUE(l.layout.shifted);
    for (size_t s = 0; s < ix->sites.size(); ++s) {
      EXPECT_EQ(l.layout.access[s],
                ix->sites[s].input == 0 ? RowAccess::kContiguous : RowAccess::kStrided) << s;
    }
    for (RowStrategy s : {RowStrategy::kBlock, RowStrategy::kLooped, RowStrategy::kCluster}) {
      const RowVariant v =
          ChooseRowVariant(l.layout.ChunkSpan(1001), l.layout.vec, l.rows, {90, 132}, s);
      auto src = EmitRowKernel(body, *ix, l.layout, v, "t");
      ASSERT_TRUE(src.ok()) << src.status();
      auto image = CompileCuda(src->source, src->name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << "\n" << v.Signature();
    }
  }
  // Short rows stay scalar; rows the width divides are not shifted.
  EXPECT_TRUE(ShiftsRows(50257, 4));
  EXPECT_TRUE(ShiftsRows(33, 4));
  EXPECT_FALSE(ShiftsRows(31, 4));
  EXPECT_FALSE(ShiftsRows(1000, 4));
  EXPECT_FALSE(ShiftsRows(1001, 1));
  {
    const graph::Graph& body = Body(Softmax("f32", "64,30"));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok());
    EXPECT_EQ(Launch(body, *ix, Contiguous(body)).layout.vec, 1);
  }
  {
    const graph::Graph& body = Body(Softmax("f32", "64,1000"));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok());
    RowLaunch l = Launch(body, *ix, Contiguous(body));
    EXPECT_EQ(l.layout.vec, 4);
    EXPECT_FALSE(l.layout.shifted);
  }
}

// The looped kernels' online pass folds a whole vector chunk into (max, sum) at once; partial
// chunks at a shifted row's ends, and rows read element by element, fold element by element.
TEST_F(RowKernelTest, LoopedOnlinePassFoldsWholeChunksAtOnce) {
  auto looped = ParseRowVariant("looped_t512_u1");
  ASSERT_TRUE(looped.ok()) << looped.status();
  auto kernel_text = [](const KernelSource& src) {
    return src.source.substr(src.source.find("// torchfuse row kernel"));
  };
  {
    const Emitted e = Emit(Softmax("f32", "64,1024"), *looped);
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_EQ(e.launch.layout.vec, 4);
    ASSERT_FALSE(e.launch.layout.shifted);
    const std::string text = kernel_text(*e.src);
    EXPECT_NE(text.find("float on0[4];"), std::string::npos) << text;
    EXPECT_NE(text.find("tf_online_add_n(a0, a1, on0);"), std::string::npos) << text;
    EXPECT_EQ(text.find("tf_online_add(a0"), std::string::npos) << text;
    ASSERT_TRUE(CompileCuda(e.src->source, e.src->name, 90).ok());
  }
  {
    const Emitted e = Emit(VocabLogSoftmax(), *looped);
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_TRUE(e.launch.layout.shifted);
    const std::string text = kernel_text(*e.src);
    const size_t whole = text.find("tf_online_add_n(");
    const size_t partial = text.find("tf_online_add(");
    ASSERT_NE(whole, std::string::npos) << text;
    ASSERT_NE(partial, std::string::npos) << text;
    EXPECT_LT(whole, partial);  // the "if (full)" branch comes first
    ASSERT_TRUE(CompileCuda(e.src->source, e.src->name, 90).ok());
  }
  {
    // Rows of single elements: a step's chunks (here one) are gathered and folded at once.
    const Emitted e = Emit(Softmax("f32", "64,30"), *looped);
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_EQ(e.launch.layout.vec, 1);
    const std::string text = kernel_text(*e.src);
    EXPECT_NE(text.find("float on0[1];"), std::string::npos) << text;
    EXPECT_NE(text.find("tf_online_add_n(a0, a1, on0);"), std::string::npos) << text;
    EXPECT_EQ(text.find("tf_online_add("), std::string::npos) << text;
    ASSERT_TRUE(CompileCuda(e.src->source, e.src->name, 90).ok());
  }
  {
    // Steps of 2 chunks of 4 (vocabulary rows, shifted): both chunks' elements fold at once,
    // with neither a bounds test nor a whole-chunk test; the remainder a chunk at a time; the
    // row's two end chunks element by element, by the first and the last thread.
    const Emitted e = Emit(VocabLogSoftmax(), *ParseRowVariant("looped_t1024_u2_l2"));
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_TRUE(e.launch.layout.shifted);
    const std::string text = kernel_text(*e.src);
    const size_t step = text.find("for (; c0 + 1024 < (nc - 1); c0 += 2048)");
    const size_t rest = text.find("for (; c0 < (nc - 1); c0 += 1024)");
    const size_t ends = text.find("if (lane == 0 || (lane == 1023 && nc > 1))");
    ASSERT_NE(step, std::string::npos) << text;
    ASSERT_NE(rest, std::string::npos) << text;
    ASSERT_NE(ends, std::string::npos) << text;
    EXPECT_LT(step, rest);
    EXPECT_LT(rest, ends);
    const std::string steps = text.substr(step, rest - step);
    EXPECT_NE(steps.find("float on0[8];"), std::string::npos) << steps;
    EXPECT_NE(steps.find("on0[k * 4 + e] = "), std::string::npos) << steps;
    EXPECT_EQ(test_support::CountOccurrences(steps, "tf_online_add_n(a0, a1, on0);"), 1) << steps;
    EXPECT_EQ(steps.find("if (c < nc)"), std::string::npos) << steps;
    EXPECT_EQ(steps.find("full"), std::string::npos) << steps;
    const size_t ends_pass = text.find("tf_shfl_xor", ends);
    const std::string end_chunks = text.substr(ends, ends_pass - ends);
    EXPECT_NE(end_chunks.find("if (c < nc)"), std::string::npos) << end_chunks;
    EXPECT_NE(end_chunks.find("tf_online_add(a0, a1, "), std::string::npos) << end_chunks;
    ASSERT_TRUE(CompileCuda(e.src->source, e.src->name, 90).ok());
  }
  {
    // Steps of 2 chunks of 8 (a bf16 softmax) fold chunk by chunk: 16 gathered values would
    // take the registers of a second block an SM.
    const Emitted e = Emit(Softmax("bf16", "64,50257"), *ParseRowVariant("looped_t1024_u2_l2"));
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_EQ(e.launch.layout.vec, 8);
    const std::string text = kernel_text(*e.src);
    EXPECT_EQ(text.find("float on0[16];"), std::string::npos) << text;
    EXPECT_NE(text.find("on0[e] = "), std::string::npos) << text;
  }
}

// What every element of a row shares and is computed from the reductions alone (log(sum) of a
// log_softmax, rsqrt(var + eps) of a layer norm) is computed once, before the chunk loop.
TEST_F(RowKernelTest, RowSharedValuesAreComputedOnceBeforeTheLoop) {
  struct Case {
    std::string text, variant, per_row;
  };
  for (const Case& c : {Case{VocabLogSoftmax(), "looped_t1024_u2_l2", "tf_log(red1)"},
                        Case{VocabLogSoftmax(), "looped_t512_u1", "tf_log(red1)"},
                        Case{LayerNorm("bf16", 64, 4096), "block_t256", "tf_rsqrt("},
                        Case{LayerNorm("f32", 64, 4096), "looped_t256_u1", "tf_rsqrt("}}) {
    const Emitted e = Emit(c.text, *ParseRowVariant(c.variant));
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    const std::string& src = e.src->source;
    const std::string out = src.substr(src.find("// output pass"));
    EXPECT_EQ(test_support::CountOccurrences(out, c.per_row), 1) << c.variant << "\n" << out;
    EXPECT_LT(out.find(c.per_row), out.find("for (")) << c.variant << "\n" << out;
    auto image = CompileCuda(src, e.src->name, 90);
    EXPECT_TRUE(image.ok()) << image.status();
  }
}

TEST_F(RowKernelTest, RowsSharedSitesLoadInsideTheOutputLoopAndRowSitesAhead) {
  // Layer norm with a residual added after it: the weight and bias (one copy for all rows)
  // load chunk by chunk inside the output pass's loop; the residual, a row of its own that
  // the output pass reads first, loads for all chunks before the work, as the row did.
  const std::string text =
      "graph(%x: bf16[64,4096], %r: bf16[64,4096]) {\n"
      "  %w: bf16[4096] = param() {name=\"w\"}\n  %b: bf16[4096] = param() {name=\"b\"}\n"
      "  %n: bf16[64,4096] = layer_norm(%x, %w, %b) {eps=1e-05, normalized_ndim=1}\n"
      "  %y: bf16[64,4096] = add(%n, %r)\n  return(%y)\n}\n";
  const Emitted e = Emit(text, *ParseRowVariant("block_t256"));
  ASSERT_TRUE(e.src.ok()) << e.src.status();
  const std::string& src = e.src->source;
  const size_t output_pass = src.find("// output pass");
  ASSERT_NE(output_pass, std::string::npos) << src;
  const std::string out = src.substr(output_pass);
  // Which input is which: the site read by the output pass that is a row of its own.
  int shared = 0, row_site = -1;
  for (size_t s = 0; s < e.ix.sites.size(); ++s) {
    bool per_row_dim = false;
    for (int d : e.ix.sites[s].map.dims) per_row_dim |= d == 0;
    if (!per_row_dim) ++shared;
    const std::string load = "l" + std::to_string(s) + "[k] = ";
    if (per_row_dim && out.find(load) != std::string::npos) row_site = static_cast<int>(s);
  }
  ASSERT_EQ(shared, 2) << src;
  ASSERT_GE(row_site, 0) << src;
  // Two loops over the chunks: the residual's loads, then the work with the shared loads.
  const size_t work = out.find("> r0;");
  ASSERT_NE(work, std::string::npos) << out;
  const std::string loop = "for (int k = 0; k < 2; ++k)";
  EXPECT_EQ(test_support::CountOccurrences(out, loop), 2) << out;
  const size_t second_loop = out.find(loop, out.find(loop) + loop.size());
  EXPECT_LT(out.find("l" + std::to_string(row_site) + "[k] = "), second_loop) << out;
  for (size_t s = 0; s < e.ix.sites.size(); ++s) {
    bool per_row_dim = false;
    for (int d : e.ix.sites[s].map.dims) per_row_dim |= d == 0;
    if (per_row_dim) continue;
    const size_t load = out.find("l" + std::to_string(s) + "[k] = ");
    EXPECT_GT(load, second_loop) << s << "\n" << out;
    EXPECT_LT(load, work) << s << "\n" << out;
  }
  auto image = CompileCuda(src, e.src->name, 90);
  EXPECT_TRUE(image.ok()) << image.status();
}

// The warps' partials: online (max, sum) pairs of 4 warps or more are folded across a warp's
// lanes by shuffles (lanes past the warps read identities), from 16 warps by the first warp
// alone, which leaves the total in shared memory; plain reductions and pairs of fewer warps
// one after another.
TEST_F(RowKernelTest, WarpsPartialsOfOnlinePairsFoldByShuffles) {
  auto source = [&](const std::string& text, const std::string& variant) {
    const Emitted e = Emit(text, *ParseRowVariant(variant));
    EXPECT_TRUE(e.src.ok()) << e.src.status();
    if (!e.src.ok()) return std::string();
    auto image = CompileCuda(e.src->source, e.src->name, 90);
    EXPECT_TRUE(image.ok()) << image.status() << "\n" << variant;
    return e.src->source;
  };
  const std::string shuffle_fold = "tf_online_merge(a0, a1, tf_shfl_xor(a0, o), tf_shfl_xor(a1, o));";
  {
    const std::string text = source(Softmax("f32", "64,50000"), "looped_t1024_u2");
    EXPECT_EQ(test_support::CountOccurrences(text, shuffle_fold), 2) << text;  // the warp's lanes, then the warps
    const size_t first_warp = text.find("if (lane < 32) {");
    ASSERT_NE(first_warp, std::string::npos) << text;
    EXPECT_LT(first_warp, text.find("a0 = lane < 32 ? sm0[lane] : -tf_inf(float(0));")) << text;
    const size_t total = text.find("sm0[0] = a0;");
    ASSERT_NE(total, std::string::npos) << text;
    EXPECT_LT(text.find("__syncthreads();", total), text.find("a0 = sm0[0];", total)) << text;
    EXPECT_EQ(text.find("sm0[w]"), std::string::npos) << text;
  }
  {
    // 8 warps: every warp folds them, no second barrier.
    const std::string text = source(Softmax("f32", "64,50000"), "looped_t256_u2");
    EXPECT_NE(text.find("a0 = sm0[lane % 8];"), std::string::npos) << text;
    EXPECT_EQ(test_support::CountOccurrences(text, "__syncthreads();"), 1) << text;
  }
  {
    // 5 warps: 8 lanes a group, the last 3 hold the identities.
    const std::string text = source(Softmax("f32", "64,50000"), "looped_t160_u2");
    EXPECT_NE(text.find("a0 = lane % 8 < 5 ? sm0[lane % 8] : -tf_inf(float(0));"),
              std::string::npos) << text;
    EXPECT_NE(text.find("a1 = lane % 8 < 5 ? sm1[lane % 8] : float(0);"), std::string::npos)
        << text;
    EXPECT_NE(text.find("for (int o = 4; o > 0; o /= 2)"), std::string::npos) << text;
  }
  {
    // 2 warps: one after another.
    const std::string text = source(Softmax("f32", "64,50000"), "looped_t64_u2");
    EXPECT_EQ(test_support::CountOccurrences(text, shuffle_fold), 1) << text;
    EXPECT_NE(text.find("sm0[w]"), std::string::npos) << text;
  }
  {
    // Plain reductions of 32 warps: one after another.
    const std::string text = source(LayerNorm("bf16", 64, 8192), "block_t1024");
    EXPECT_NE(text.find("a0 = (a0 + sm0[w]);"), std::string::npos) << text;
    EXPECT_EQ(text.find("sm0[lane %"), std::string::npos) << text;
  }
}

TEST_F(RowKernelTest, LoopedRowsWithL2HintsKeepTheFirstReadAndStreamTheLast) {
  auto hinted = ParseRowVariant("looped_t512_u1_l2");
  ASSERT_TRUE(hinted.ok()) << hinted.status();
  EXPECT_TRUE(hinted->l2_hints);
  EXPECT_EQ(hinted->Signature(), "looped_t512_u1_l2");
  EXPECT_FALSE(ParseRowVariant("looped_t512_u1")->l2_hints);
  // Only the looped strategy reads a row once per pass.
  EXPECT_FALSE(ParseRowVariant("block_t256_l2").ok());
  RowVariant block_l2;
  block_l2.strategy = RowStrategy::kBlock;
  block_l2.threads = 256;
  block_l2.l2_hints = true;
  EXPECT_FALSE(RowVariantFits(block_l2, 4096, 4, {90, 132}));
  EXPECT_TRUE(RowVariantFits(*hinted, 4096, 4, {90, 132}));
  {
    // The vocabulary log_softmax: x is read by the online amax+sum pass (kept in L2) and by
    // the output pass (streamed), whose f32 stores stream too.
    const Emitted e = Emit(VocabLogSoftmax(), *hinted);
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_TRUE(e.launch.layout.shifted);
    const KernelSource* src = &*e.src;
    const std::string& text = src->source;
    const size_t keep = text.find("tf_load_keep(reinterpret_cast<const TfVec<tf_bf16, 4>*>(in0");
    const size_t stream = text.find("tf_load_stream(reinterpret_cast<const TfVec<tf_bf16, 4>*>(in0");
    const size_t output_pass = text.find("// output pass");
    ASSERT_NE(keep, std::string::npos) << text;
    ASSERT_NE(stream, std::string::npos) << text;
    EXPECT_LT(keep, output_pass);
    EXPECT_GT(stream, output_pass);
    EXPECT_NE(text.find("if (full) tf_store_stream(reinterpret_cast<TfVec<float, 4>*>(out0"),
              std::string::npos) << text;
    EXPECT_EQ(text.find("*reinterpret_cast<const TfVec<tf_bf16, 4>*>"), std::string::npos);
    // The same variant without hints reads and stores as before.
    RowVariant plain = *hinted;
    plain.l2_hints = false;
    auto plain_src = EmitRowKernel(*e.body, e.ix, e.launch.layout, plain, "t");
    ASSERT_TRUE(plain_src.ok());
    const std::string plain_kernel =
        plain_src->source.substr(plain_src->source.find("// torchfuse row kernel"));
    EXPECT_EQ(plain_kernel.find("tf_load_keep("), std::string::npos);
    EXPECT_EQ(plain_kernel.find("tf_store_stream("), std::string::npos);
    EXPECT_NE(plain_kernel.find("if (full) l0[k] = *reinterpret_cast<const TfVec<tf_bf16, 4>*>"),
              std::string::npos);
    EXPECT_NE(plain_src->name, src->name);
    for (int arch : {90, 75}) {  // sm_75 has no L2 policies: plain accesses there
      auto image = CompileCuda(text, src->name, arch);
      ASSERT_TRUE(image.ok()) << image.status() << " sm_" << arch;
    }
    auto ptx = CompilePtx(text, src->name, 90);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EXPECT_NE(ptx->find("createpolicy.fractional.L2::evict_last"), std::string::npos);
    EXPECT_NE(ptx->find("ld.global.nc.L2::cache_hint.v2.u32"), std::string::npos) << *ptx;
    EXPECT_NE(ptx->find("ld.global.cs.v2.u32"), std::string::npos);
    EXPECT_NE(ptx->find("st.global.cs.v4.u32"), std::string::npos);
  }
  {
    // Layer norm: x, read by the mean, variance and output passes, is kept by the first two and
    // streamed by the last; the weight and bias, one row shared by every row, take no hints.
    const graph::Graph& body = Body(LayerNorm("f32", 16, 4096));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok()) << ix.status();
    RowLaunch l = Launch(body, *ix, Contiguous(body));
    ASSERT_EQ(l.layout.vec, 4);
    auto src = EmitRowKernel(body, *ix, l.layout, *hinted, "t");
    ASSERT_TRUE(src.ok()) << src.status();
    const std::string& text = src->source;
    int x_site = -1;
    for (size_t s = 0; s < ix->sites.size(); ++s) {
      if (ix->sites[s].input == 0) x_site = static_cast<int>(s);
    }
    ASSERT_GE(x_site, 0);
    const std::string x = "in0 + base" + std::to_string(x_site);
    EXPECT_NE(text.find("tf_load_keep(reinterpret_cast<const TfVec<float, 4>*>(" + x),
              std::string::npos) << text;
    EXPECT_NE(text.find("tf_load_stream(reinterpret_cast<const TfVec<float, 4>*>(" + x),
              std::string::npos);
    for (size_t s = 0; s < ix->sites.size(); ++s) {
      if (ix->sites[s].input == 0) continue;
      const std::string site = "(in" + std::to_string(ix->sites[s].input) + " + base" +
                               std::to_string(s);
      EXPECT_NE(text.find("= *reinterpret_cast<const TfVec<float, 4>*>" + site), std::string::npos)
          << site << "\n" << text;
      EXPECT_EQ(text.find("tf_load_stream(reinterpret_cast<const TfVec<float, 4>*>" + site),
                std::string::npos);
    }
    auto image = CompileCuda(text, src->name, 90);
    ASSERT_TRUE(image.ok()) << image.status();
  }
  {
    // The prelude's hinted accesses compile for every vector size a row kernel uses (1 to 16
    // bytes), with and without the L2 policies.
    std::string kernel = DevicePrelude() + "\nextern \"C\" __global__ void k(";
    std::string body;
    int i = 0;
    for (const char* type : {"bool", "tf_bf16", "tf_half", "float", "double", "tf_i64"}) {
      for (int n : {1, 2, 4, 8}) {
        const std::string vt = absl::StrCat("TfVec<", type, ", ", n, ">");
        absl::StrAppend(&kernel, i ? ", " : "", "const ", vt, "* a", i, ", ", vt, "* b", i);
        absl::StrAppend(&body, "  { const unsigned long long p = tf_l2_keep_policy();\n    ", vt,
                        " v = tf_load_keep(a", i, " + threadIdx.x, p);\n    ", vt,
                        " w = tf_load_stream(a", i, " + blockDim.x + threadIdx.x);\n",
                        "    tf_store_stream(b", i, " + threadIdx.x, v);\n    tf_store_stream(b",
                        i, " + blockDim.x + threadIdx.x, w); }\n");
        ++i;
      }
    }
    kernel += ") {\n" + body + "}\n";
    for (int arch : {90, 75}) {
      auto image = CompileCuda(kernel, "k", arch);
      EXPECT_TRUE(image.ok()) << image.status() << " sm_" << arch;
    }
  }
  {
    RowVariant v = block_l2;
    const graph::Graph& body = Body(Softmax("f32", "8,4096"));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok());
    EXPECT_EQ(EmitRowKernel(body, *ix, Launch(body, *ix, Contiguous(body)).layout, v, "t")
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(RowKernelTest, StagedLoopedRowsAreReadFromMemoryOnce) {
  auto staged = ParseRowVariant("looped_t512_u2_sm");
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_TRUE(staged->stage);
  EXPECT_EQ(staged->Signature(), "looped_t512_u2_sm");
  EXPECT_EQ(ParseRowVariant("looped_t512_u2_sm_l2")->Signature(), "looped_t512_u2_l2_sm");
  EXPECT_FALSE(ParseRowVariant("block_t256_sm").ok());
  EXPECT_FALSE(RowVariantFits(*staged, kAnyRowLength, 4, {90, 132}));
  {
    // The vocabulary log_softmax: the online pass reads x from memory and leaves each chunk
    // in shared memory, the output pass reads it back from there, partial chunks included.
    const Emitted e = Emit(VocabLogSoftmax(), *staged);
    ASSERT_TRUE(e.src.ok()) << e.src.status();
    ASSERT_TRUE(e.launch.layout.shifted);
    const KernelSource* src = &*e.src;
    const std::string& text = src->source;
    const graph::Graph& body = *e.body;
    const RowLayout& layout = e.launch.layout;
    // 12565 vectors of 4 bf16 (50257 elements and a partial vector), in 16-byte units.
    EXPECT_EQ(src->dynamic_smem, 100528);
    EXPECT_EQ(RowStagedBytes(body, e.ix, layout), 100528);
    const size_t output_pass = text.find("// output pass");
    ASSERT_NE(output_pass, std::string::npos);
    const size_t left = text.find("stage0[c] = l0[k];");
    ASSERT_NE(left, std::string::npos) << text;
    EXPECT_LT(left, output_pass);
    EXPECT_GT(text.find("l0[k] = stage0[c];"), output_pass);
    EXPECT_EQ(text.find("in0", output_pass), std::string::npos) << text.substr(output_pass);
    EXPECT_TRUE(RowVariantFitsKernel(*staged, body, e.ix, layout, {90, 132}));
    EXPECT_FALSE(RowVariantFitsKernel(*staged, body, e.ix, layout, {75, 40}));  // 64 KiB
    auto image = CompileCuda(text, src->name, 90);
    ASSERT_TRUE(image.ok()) << image.status();
    auto ptx = CompilePtx(text, src->name, 90);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EXPECT_NE(ptx->find(".extern .shared"), std::string::npos);
    // Unstaged, the same variant takes no shared memory and reads x in both passes.
    RowVariant plain = *staged;
    plain.stage = false;
    auto plain_src = EmitRowKernel(body, e.ix, layout, plain, "t");
    ASSERT_TRUE(plain_src.ok());
    EXPECT_EQ(plain_src->dynamic_smem, 0);
    EXPECT_NE(plain_src->source.find("in0", plain_src->source.find("// output pass")),
              std::string::npos);
  }
  {
    // Layer norm: x, read by three passes, is staged; the weight and bias (one row for every
    // row) are not.
    const graph::Graph& body = Body(LayerNorm("f32", 16, 4096));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok()) << ix.status();
    RowLaunch l = Launch(body, *ix, Contiguous(body));
    auto src = EmitRowKernel(body, *ix, l.layout, *staged, "t");
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(src->dynamic_smem, 4096 * 4);
    for (size_t s = 0; s < ix->sites.size(); ++s) {
      const std::string stage = "stage" + std::to_string(s);
      EXPECT_EQ(src->source.find(stage) != std::string::npos, ix->sites[s].input == 0)
          << s << "\n" << src->source;
    }
    auto image = CompileCuda(src->source, src->name, 90);
    ASSERT_TRUE(image.ok()) << image.status();
  }
  // Rows that do not fit: f32 rows of 65536 (256 KiB) nowhere, bf16 ones (128 KiB) on sm_90
  // (and sm_100) but not in the 99 KiB of sm_89 and sm_120/121.
  for (const auto& [dtype, bytes, on_sm90] : {std::tuple{"f32", 65536 * 4, false},
                                               std::tuple{"bf16", 65536 * 2, true}}) {
    SCOPED_TRACE(dtype);
    const Emitted e = Emit(Softmax(dtype, "4,65536"), *staged);
    EXPECT_EQ(RowStagedBytes(*e.body, e.ix, e.launch.layout), bytes);
    EXPECT_EQ(RowVariantFitsKernel(*staged, *e.body, e.ix, e.launch.layout, {90, 132}), on_sm90);
    EXPECT_EQ(RowVariantFitsKernel(*staged, *e.body, e.ix, e.launch.layout, {100, 148}), on_sm90);
    for (int arch : {89, 120, 121}) {
      EXPECT_FALSE(RowVariantFitsKernel(*staged, *e.body, e.ix, e.launch.layout, {arch, 128}))
          << "sm_" << arch;
    }
    EXPECT_TRUE(RowVariantFitsKernel(*ParseRowVariant("looped_t512_u2"), *e.body, e.ix,
                                     e.launch.layout, {90, 132}));
  }
  {
    // A symbolic row length is not staged.
    const graph::Graph& body = Body(Softmax("f32", "8,T"));
    auto ix = AnalyzeRowIndexing(body);
    ASSERT_TRUE(ix.ok()) << ix.status();
    ASSERT_TRUE(ix->dynamic_row());
    RowLayout layout;
    layout.access = std::vector<RowAccess>(ix->sites.size(), RowAccess::kContiguous);
    layout.vec = 4;
    layout.row_bound = 4096;
    EXPECT_EQ(RowStagedBytes(body, *ix, layout), -1);
    EXPECT_FALSE(RowVariantFitsKernel(*staged, body, *ix, layout, {90, 132}));
    EXPECT_EQ(EmitRowKernel(body, *ix, layout, *staged, "t").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(RowKernelTest, LayerNormOverChannelsLastReadsTheBiasAddThroughItsPermute) {
  // ConvNeXt's norm: (conv(x) + bias).permute(0, 2, 3, 1), normalized over C. With the conv's
  // output laid out channels last, each row of C values is contiguous: vector loads.
  const graph::Graph& body = Body(R"(graph(%c: bf16[4,96,14,14], %b: bf16[96]) {
      %w: bf16[96] = param() {name="weight"}
      %nb: bf16[96] = param() {name="norm_bias"}
      %bv: bf16[1,96,1,1] = reshape(%b) {shape=[1,96,1,1]}
      %a: bf16[4,96,14,14] = add(%c, %bv)
      %p: bf16[4,14,14,96] = permute(%a) {dims=[0,2,3,1]}
      %y: bf16[4,14,14,96] = layer_norm(%p, %w, %nb) {eps=1e-06, normalized_ndim=1}
      return(%y)
    })");
  auto ix = AnalyzeRowIndexing(body);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ix->domain, (std::vector<int64_t>{4, 14, 14, 96}));
  std::vector<TensorView> views = Contiguous(body);
  int conv = -1;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].sizes == std::vector<int64_t>{4, 96, 14, 14}) {
      conv = static_cast<int>(i);
      views[i].strides = {96 * 14 * 14, 1, 14 * 96, 96};  // channels last
    }
  }
  ASSERT_GE(conv, 0);
  RowLaunch l = Launch(body, *ix, views);
  EXPECT_EQ(l.layout.vec, 8);
  for (size_t s = 0; s < ix->sites.size(); ++s) {
    if (ix->sites[s].input == conv) {
      EXPECT_EQ(l.layout.access[s], RowAccess::kContiguous);
    }
  }
  for (RowStrategy st : {RowStrategy::kWarp, RowStrategy::kBlock, RowStrategy::kLooped}) {
    const RowVariant v = ChooseRowVariant(96, l.layout.vec, l.rows, {90, 132}, st);
    auto src = EmitRowKernel(body, *ix, l.layout, v, "t");
    ASSERT_TRUE(src.ok()) << src.status();
    auto image = CompileCuda(src->source, src->name, 90);
    ASSERT_TRUE(image.ok()) << image.status() << " " << v.Signature();
  }
}

TEST_F(RowKernelTest, SourceIsDeterministicAndNamesTheStrategy) {
  const graph::Graph& body = Body(Softmax("bf16", "64,4096"));
  auto ix = AnalyzeRowIndexing(body);
  ASSERT_TRUE(ix.ok());
  RowLaunch l = Launch(body, *ix, Contiguous(body));
  RowVariant v = ChooseRowVariant(4096, l.layout.vec, 64, {90, 132}, RowStrategy::kLooped);
  auto a = EmitRowKernel(body, *ix, l.layout, v, "softmax");
  auto b = EmitRowKernel(body, *ix, l.layout, v, "softmax");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->source, b->source);
  EXPECT_EQ(a->name.rfind("tf_softmax_bf16_looped_v8_", 0), 0u) << a->name;
  EXPECT_NE(a->source.find("tf_online_add"), std::string::npos);  // one pass for max and sum
}

// The kernel's own text, without the prelude that defines every helper.
std::string KernelText(const KernelSource& src) {
  const size_t at = src.source.find("extern \"C\" __global__");
  return at == std::string::npos ? std::string() : src.source.substr(at);
}

// Row kernels compute exp and division with the hardware's approximations in f32 as in
// f16/bf16 (a few f32 ulps, Inductor's forms); f64 kernels keep the exact forms, tanh's
// approximation (2^-11) is for 16-bit outputs only, and a comparison's operands in a 16-bit
// kernel stay exact (rounded as eager rounds them: an approximation could flip the comparison).
TEST_F(RowKernelTest, RowKernelsTakeTheHardwareExpAndDivisionInF32) {
  for (const std::string dt : {"f32", "f64", "f16", "bf16"}) {
    SCOPED_TRACE(dt);
    const bool fast = dt != "f64";
    for (const std::string& text : {Softmax(dt, "64,4096"), LayerNorm(dt, 64, 4096)}) {
      auto src = BlockKernel(text, 4096, 64);
      ASSERT_TRUE(src.ok()) << src.status();
      const std::string k = KernelText(*src);
      ASSERT_FALSE(k.empty());
      if (text.find("softmax") != std::string::npos) {
        EXPECT_EQ(k.find("tf_exp_fast(") != std::string::npos, fast) << k;
        EXPECT_EQ(k.find("tf_div_fast(") != std::string::npos, fast) << k;
      } else {  // layer norm: the rsqrt and products of its decomposition are exact anyway
        EXPECT_EQ(k.find("tf_div_fast("), std::string::npos) << k;
      }
      EXPECT_TRUE(CompileCuda(src->source, src->name, 90).ok());
    }
    // tanh(x) - amax(x): the hardware tanh only where the output is 16-bit.
    auto src = BlockKernel(absl::StrCat("graph(%x: ", dt, "[8,256]) {\n"
                                        "  %m: ", dt, "[8,1] = amax(%x) {dims=[-1], keepdim=1}\n"
                                        "  %t: ", dt, "[8,256] = tanh(%x)\n"
                                        "  %y: ", dt, "[8,256] = sub(%t, %m)\n"
                                        "  return(%y)\n}\n"),
                           256, 8);
    ASSERT_TRUE(src.ok()) << src.status();
    const std::string k = KernelText(*src);
    EXPECT_EQ(k.find("tf_tanh_fast(") != std::string::npos, dt == "f16" || dt == "bf16") << k;
  }
  // where(x > exp(x) / 2, x, 0): the comparison's exp and division stay exact.
  auto src = BlockKernel(
      "graph(%x: bf16[8,256]) {\n"
      "  %m: bf16[8,1] = amax(%x) {dims=[-1], keepdim=1}\n"
      "  %e: bf16[8,256] = exp(%x)\n"
      "  %two: f64[] = constant() {dtype=\"f64\", value=2.0, wrapped=1}\n"
      "  %h: bf16[8,256] = div(%e, %two)\n"
      "  %c: bool[8,256] = gt(%x, %h)\n"
      "  %z: f64[] = constant() {dtype=\"f64\", value=0.0, wrapped=1}\n"
      "  %w: bf16[8,256] = where(%c, %x, %z)\n"
      "  %y: bf16[8,256] = sub(%w, %m)\n"
      "  return(%y)\n}\n",
      256, 8);
  ASSERT_TRUE(src.ok()) << src.status();
  const std::string k = KernelText(*src);
  EXPECT_EQ(k.find("tf_exp_fast("), std::string::npos) << k;
  EXPECT_EQ(k.find("tf_div_fast("), std::string::npos) << k;
  EXPECT_NE(k.find("tf_exp("), std::string::npos) << k;
}

}  // namespace
}  // namespace torchfuse::codegen
