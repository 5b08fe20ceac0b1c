#include "codegen_nvrtc/indexing.h"

#include <gtest/gtest.h>

#include <cstring>

#include "graph/parser.h"

namespace torchfuse::codegen {
namespace {

std::unique_ptr<graph::Graph> Body(const char* text) {
  auto g = graph::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

std::vector<int64_t> Contiguous(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k) s[k] = s[k + 1] * sizes[k + 1];
  return s;
}

TensorView View(std::vector<int64_t> sizes, uintptr_t address = 0, int element_size = 4) {
  std::vector<int64_t> strides = Contiguous(sizes);
  return {std::move(sizes), std::move(strides), address, element_size};
}

TEST(IndexingTest, MapsBroadcastAndTransposedOperands) {
  auto g = Body(R"(graph(%x: f32[4,8], %b: f32[4]) {
      %t: f32[8,4] = transpose(%x) {dim0=0, dim1=1}
      %y: f32[8,4] = add(%t, %b)
      return(%y)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ix->domain, (std::vector<int64_t>{8, 4}));
  ASSERT_EQ(ix->sites.size(), 2u);
  EXPECT_EQ(ix->sites[0].input, 0);
  EXPECT_EQ(ix->sites[0].map, (IndexMap{1, 0}));  // x[i,j] is read at domain (j,i)
  EXPECT_EQ(ix->sites[1].input, 1);
  EXPECT_EQ(ix->sites[1].map, (IndexMap{1}));
}

TEST(IndexingTest, ContiguousGroupCollapsesToOneVectorizedDim) {
  auto g = Body(R"(graph(%x: f32[8,16,32], %y: f32[8,16,32]) {
      %z: f32[8,16,32] = mul(%x, %y)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok());
  LaunchLayout l = ComputeLayout(*ix, {View({8, 16, 32}), View({8, 16, 32})}, {4}, {0});
  EXPECT_EQ(l.kernel.rank, 1);
  EXPECT_EQ(l.sizes, (std::vector<int64_t>{8 * 16 * 32}));
  EXPECT_EQ(l.kernel.access, (std::vector<Access>{Access::kLinear, Access::kLinear}));
  EXPECT_EQ(l.kernel.vec, 4);
  EXPECT_TRUE(l.kernel.index32);
}

TEST(IndexingTest, BiasKeepsTwoDimsAndVectorizes) {
  auto g = Body(R"(graph(%x: bf16[64,128], %b: bf16[128]) {
      %z: bf16[64,128] = add(%x, %b)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok());
  LaunchLayout l = ComputeLayout(*ix, {View({64, 128}, 0, 2), View({128}, 0, 2)}, {2}, {0});
  EXPECT_EQ(l.kernel.rank, 2);
  EXPECT_EQ(l.kernel.access, (std::vector<Access>{Access::kLinear, Access::kInnerContiguous}));
  EXPECT_EQ(l.kernel.vec, 8);
  EXPECT_EQ(l.strides[1], (std::vector<int64_t>{0, 1}));
  // Another batch size gives the same kernel layout, so the same source and binary.
  auto g96 = Body(R"(graph(%x: bf16[96,128], %b: bf16[128]) {
      %z: bf16[96,128] = add(%x, %b)
      return(%z)
    })");
  auto ix96 = AnalyzeIndexing(*g96);
  ASSERT_TRUE(ix96.ok());
  LaunchLayout other = ComputeLayout(*ix96, {View({96, 128}, 0, 2), View({128}, 0, 2)}, {2}, {0});
  EXPECT_TRUE(other.kernel == l.kernel);
  EXPECT_EQ(other.numel, 96 * 128);
}

TEST(IndexingTest, StridedOrMisalignedInputsFallBackToScalar) {
  auto g = Body(R"(graph(%x: f32[64,128]) {
      %z: f32[64,128] = exp(%x)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok());
  // A transposed view (sizes [64,128], strides [1,64]) read where the output is contiguous: a
  // copy that transposes.
  auto copy = Body(R"(graph(%x: f32[64,128]) {
      %z: f32[64,128] = contiguous(%x)
      return(%z)
    })");
  auto cix = AnalyzeIndexing(*copy);
  ASSERT_TRUE(cix.ok());
  EXPECT_FALSE(cix->pointwise_outputs);
  TensorView t{{64, 128}, {1, 64}, 0, 4};
  LaunchLayout strided = ComputeLayout(*cix, {t}, {4}, {0});
  EXPECT_EQ(strided.kernel.access, std::vector<Access>{Access::kTile});
  EXPECT_EQ(strided.kernel.tile_dim, 0);
  EXPECT_EQ(strided.kernel.vec, 1);
  // exp of it is laid out as its input (as eager's is): read and written in order.
  EXPECT_TRUE(ix->pointwise_outputs);
  EXPECT_EQ(DomainOrder(*ix, {t}), (std::vector<int>{1, 0}));
  LaunchLayout follows = ComputeLayout(*ix, {t}, {4}, {0});
  EXPECT_EQ(follows.kernel.access, std::vector<Access>{Access::kLinear});
  EXPECT_EQ(follows.kernel.vec, 4);
  LaunchLayout misaligned = ComputeLayout(*ix, {View({64, 128}, 4)}, {4}, {0});
  EXPECT_EQ(misaligned.kernel.access, std::vector<Access>{Access::kLinear});
  EXPECT_EQ(misaligned.kernel.vec, 1);
}

TEST(IndexingTest, PointwiseResultsOfAContiguousCopyAreLaidOutAsTheCopy) {
  // exp(x.contiguous()) with x a transposed view: eager's exp sees the dense copy, so its result
  // is contiguous; the kernel reads x transposed (through tiles) and writes in order.
  auto g = Body(R"(graph(%x: f32[64,128]) {
      %c: f32[64,128] = contiguous(%x) {dense=1}
      %z: f32[64,128] = exp(%c)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  ASSERT_EQ(ix->sites.size(), 1u);
  EXPECT_TRUE(ix->sites[0].through_copy);
  TensorView t{{64, 128}, {1, 64}, 0, 4};
  EXPECT_EQ(DomainOrder(*ix, {t}), (std::vector<int>{0, 1}));
  LaunchLayout l = ComputeLayout(*ix, {t}, {4}, {0});
  EXPECT_EQ(l.kernel.access, std::vector<Access>{Access::kTile});
  EXPECT_EQ(l.kernel.tile_dim, 0);
  // A copy of a permute: laid out as the permute's dims, whatever x's strides.
  auto p = Body(R"(graph(%x: f32[8,16,32]) {
      %q: f32[32,8,16] = permute(%x) {dims=[2,0,1]}
      %c: f32[32,8,16] = contiguous(%q) {dense=1}
      %z: f32[32,8,16] = mul(%c, %c)
      return(%z)
    })");
  auto pix = AnalyzeIndexing(*p);
  ASSERT_TRUE(pix.ok()) << pix.status();
  EXPECT_EQ(DomainOrder(*pix, {View({8, 16, 32})}), (std::vector<int>{0, 1, 2}));
  // Without the copy the result follows x: dims 1, 2, then 0 innermost.
  auto np = Body(R"(graph(%x: f32[8,16,32]) {
      %q: f32[32,8,16] = permute(%x) {dims=[2,0,1]}
      %z: f32[32,8,16] = mul(%q, %q)
      return(%z)
    })");
  auto npix = AnalyzeIndexing(*np);
  ASSERT_TRUE(npix.ok()) << npix.status();
  EXPECT_FALSE(npix->sites[0].through_copy);
  EXPECT_EQ(DomainOrder(*npix, {View({8, 16, 32})}), (std::vector<int>{1, 2, 0}));
  // A copy that preserves the layout (clone's default) leaves the order to x too.
  auto keep = Body(R"(graph(%x: f32[8,16,32]) {
      %q: f32[32,8,16] = permute(%x) {dims=[2,0,1]}
      %c: f32[32,8,16] = contiguous(%q)
      %z: f32[32,8,16] = mul(%c, %c)
      return(%z)
    })");
  auto kix = AnalyzeIndexing(*keep);
  ASSERT_TRUE(kix.ok()) << kix.status();
  EXPECT_FALSE(kix->sites[0].through_copy);
  EXPECT_EQ(DomainOrder(*kix, {View({8, 16, 32})}), (std::vector<int>{1, 2, 0}));
}

TEST(IndexingTest, ScalarBroadcastAndSizeOneDims) {
  auto g = Body(R"(graph(%x: f32[1,7,1], %s: f32[]) {
      %z: f32[1,7,1] = mul(%x, %s)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok());
  LaunchLayout l = ComputeLayout(*ix, {View({1, 7, 1}), View({})}, {4}, {0});
  EXPECT_EQ(l.kernel.rank, 1);
  EXPECT_EQ(l.numel, 7);
  EXPECT_EQ(l.kernel.access, (std::vector<Access>{Access::kLinear, Access::kScalar}));
}

TEST(IndexingTest, LargeOffsetsNeed64BitIndexing) {
  auto g = Body(R"(graph(%x: f32[65536,65537]) {
      %z: f32[65536,65537] = neg(%x)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok());
  LaunchLayout l = ComputeLayout(*ix, {View({65536, 65537})}, {4}, {0});
  EXPECT_FALSE(l.kernel.index32);
  EXPECT_EQ(l.ParamBlock().size(), 8u * (1 + 1 + 1));
}

TEST(IndexingTest, SlicesAndSelectsBecomeOffsetsOfTheirSites) {
  // SwiGLU's halves and a select of a row: three sites of one input, told apart by offsets.
  auto g = Body(R"(graph(%x: f32[4,16]) {
      %a: f32[4,8] = slice(%x) {dim=1, start=0, end=8, step=1}
      %b: f32[4,8] = slice(%x) {dim=1, start=8, end=16, step=1}
      %r: f32[1,16] = slice(%x) {dim=0, start=2, end=3, step=1}
      %s: f32[16] = squeeze(%r) {dims=[0]}
      %t: f32[8] = slice(%s) {dim=0, start=4, end=12, step=1}
      %m: f32[4,8] = mul(%a, %b)
      %y: f32[4,8] = add(%m, %t)
      return(%y)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  ASSERT_EQ(ix->sites.size(), 3u);
  IndexMap a{0, 1}, b{0, 1}, row(2);
  b.offsets = {0, 8};
  row.dims = {-1, 1};
  row.offsets = {2, 4};
  EXPECT_EQ(ix->sites[0].map, a);
  EXPECT_EQ(ix->sites[1].map, b);
  EXPECT_EQ(ix->sites[2].map, row);
  EXPECT_EQ(OffsetSites(ix->sites), (std::vector<int>{1, 2}));

  // Offsets follow the run-time strides: x transposed in memory (strides 1, 4).
  TensorView x{{4, 16}, {1, 4}, 0, 4};
  EXPECT_EQ(SiteOffsets(ix->sites, {x}), (std::vector<int64_t>{0, 32, 2 + 16}));
  const LaunchLayout contiguous = ComputeLayout(*ix, {View({4, 16})}, {4}, {0});
  EXPECT_EQ(contiguous.offsets, (std::vector<int64_t>{8, 2 * 16 + 4}));
  EXPECT_EQ(contiguous.kernel.vec, 4);  // every site stays 16-byte aligned
  // The parameter block ends with the offset sites' offsets.
  const std::vector<uint8_t> params = contiguous.ParamBlock();
  ASSERT_GE(params.size(), 8u);
  int32_t last[2];
  std::memcpy(last, params.data() + params.size() - 8, 8);
  EXPECT_EQ(last[0], 8);
  EXPECT_EQ(last[1], 36);
}

TEST(IndexingTest, AnOffsetOffAlignmentLoadsElementByElement) {
  auto g = Body(R"(graph(%x: f32[4,18]) {
      %a: f32[4,9] = slice(%x) {dim=1, start=0, end=9, step=1}
      %b: f32[4,9] = slice(%x) {dim=1, start=9, end=18, step=1}
      %y: f32[4,9] = mul(%a, %b)
      return(%y)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ComputeLayout(*ix, {View({4, 18})}, {4}, {0}).kernel.vec, 1);
  auto even = Body(R"(graph(%x: f32[4,16]) {
      %b: f32[4,4] = slice(%x) {dim=1, start=6, end=10, step=1}
      %y: f32[4,4] = neg(%b)
      return(%y)
    })");
  auto ix2 = AnalyzeIndexing(*even);
  ASSERT_TRUE(ix2.ok()) << ix2.status();
  // Start 6 is 24 bytes in: not 16-byte aligned. The output's rows are whole vectors, so the
  // kernel stores vectors and the site loads each element by itself.
  LaunchLayout rows = ComputeLayout(*ix2, {View({4, 16})}, {4}, {0});
  EXPECT_EQ(rows.kernel.vec, 4);
  EXPECT_EQ(rows.kernel.access, std::vector<Access>{Access::kLanes});
  // Aligned, the same rows load as vectors.
  auto at8 = Body(R"(graph(%x: f32[4,16]) {
      %b: f32[4,4] = slice(%x) {dim=1, start=8, end=12, step=1}
      %y: f32[4,4] = neg(%b)
      return(%y)
    })");
  auto ix3 = AnalyzeIndexing(*at8);
  ASSERT_TRUE(ix3.ok()) << ix3.status();
  LaunchLayout whole = ComputeLayout(*ix3, {View({4, 16})}, {4}, {0});
  EXPECT_EQ(whole.kernel.vec, 4);
  EXPECT_EQ(whole.kernel.access, std::vector<Access>{Access::kInnerContiguous});
  // A flat domain off alignment (one dim, no index arithmetic to save) stays scalar.
  auto flat = Body(R"(graph(%x: f32[17]) {
      %b: f32[16] = slice(%x) {dim=0, start=1, end=17, step=1}
      %y: f32[16] = neg(%b)
      return(%y)
    })");
  auto ix4 = AnalyzeIndexing(*flat);
  ASSERT_TRUE(ix4.ok()) << ix4.status();
  EXPECT_EQ(ComputeLayout(*ix4, {View({17})}, {4}, {0}).kernel.vec, 1);
  // So does a strided site: x^T's rows are not contiguous (the output follows y's layout).
  auto tr = Body(R"(graph(%y: f32[8,4], %x: f32[8,8]) {
      %t: f32[8,8] = permute(%x) {dims=[1,0]}
      %b: f32[8,4] = slice(%t) {dim=1, start=1, end=5, step=1}
      %z: f32[8,4] = add(%y, %b)
      return(%z)
    })");
  auto ix5 = AnalyzeIndexing(*tr);
  ASSERT_TRUE(ix5.ok()) << ix5.status();
  EXPECT_EQ(ComputeLayout(*ix5, {View({8, 4}), View({8, 8})}, {4}, {0}).kernel.vec, 1);
}

TEST(IndexingTest, AStridedTableReadManyTimesLoadsElementByElement) {
  // A table read through a permute (inner stride 2) by every row of x: where each of its
  // elements serves 8 outputs or more, vectors with per-lane loads; else scalar.
  auto g = Body(R"(graph(%x: f32[64,2,8], %t: f32[8,2]) {
      %p: f32[2,8] = permute(%t) {dims=[1,0]}
      %y: f32[64,2,8] = add(%x, %p)
      return(%y)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  LaunchLayout many = ComputeLayout(*ix, {View({64, 2, 8}), View({8, 2})}, {4}, {0});
  EXPECT_EQ(many.kernel.vec, 4);
  EXPECT_EQ(many.kernel.access, (std::vector<Access>{Access::kLinear, Access::kLanes}));
  auto few = Body(R"(graph(%x: f32[2,2,8], %t: f32[8,2]) {
      %p: f32[2,8] = permute(%t) {dims=[1,0]}
      %y: f32[2,2,8] = add(%x, %p)
      return(%y)
    })");
  auto fix = AnalyzeIndexing(*few);
  ASSERT_TRUE(fix.ok()) << fix.status();
  LaunchLayout once = ComputeLayout(*fix, {View({2, 2, 8}), View({8, 2})}, {4}, {0});
  EXPECT_EQ(once.kernel.vec, 1);
  EXPECT_EQ(once.kernel.access, (std::vector<Access>{Access::kLinear, Access::kStrided}));
}

TEST(IndexingTest, AStreamingTransposeIsTiledOverItsContiguousDim) {
  // y + x.t(): the output follows y, x is read with strides (1, 48) over the domain [48, 64]:
  // tiles of (dim 0, dim 1), x read through shared memory.
  auto g = Body(R"(graph(%y: f32[48,64], %x: f32[64,48]) {
      %p: f32[48,64] = permute(%x) {dims=[1,0]}
      %z: f32[48,64] = add(%y, %p)
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  LaunchLayout l = ComputeLayout(*ix, {View({48, 64}), View({64, 48})}, {4}, {0});
  EXPECT_EQ(l.kernel.vec, 1);
  EXPECT_EQ(l.kernel.tile_dim, 0);
  EXPECT_EQ(l.kernel.access, (std::vector<Access>{Access::kLinear, Access::kTile}));
  // Rows of 4 floats loaded and stored as one vector (16 bytes).
  EXPECT_EQ(l.kernel.tile_vec, 4);
  EXPECT_NE(l.kernel.Signature().find("_t0.4_"), std::string::npos) << l.kernel.Signature();
  // x starting 2 floats in: vectors of 2; sizes of 45 and 70: no vectors.
  EXPECT_EQ(ComputeLayout(*ix, {View({48, 64}), View({64, 48}, 8)}, {4}, {0}).kernel.tile_vec, 2);
  auto odd = Body(R"(graph(%y: f32[45,70], %x: f32[70,45]) {
      %p: f32[45,70] = permute(%x) {dims=[1,0]}
      %z: f32[45,70] = add(%y, %p)
      return(%z)
    })");
  auto oix = AnalyzeIndexing(*odd);
  ASSERT_TRUE(oix.ok()) << oix.status();
  LaunchLayout ol = ComputeLayout(*oix, {View({45, 70}), View({70, 45})}, {4}, {0});
  EXPECT_EQ(ol.kernel.tile_dim, 0);
  EXPECT_EQ(ol.kernel.tile_vec, 1);
  // The two inner dims of a 3-D tensor swapped: tiles of (dim 1, dim 2), dim 0 per tile.
  auto g3 = Body(R"(graph(%y: f32[4,40,64], %x: f32[4,64,40]) {
      %p: f32[4,40,64] = permute(%x) {dims=[0,2,1]}
      %z: f32[4,40,64] = mul(%y, %p)
      return(%z)
    })");
  auto ix3 = AnalyzeIndexing(*g3);
  ASSERT_TRUE(ix3.ok()) << ix3.status();
  LaunchLayout l3 = ComputeLayout(*ix3, {View({4, 40, 64}), View({4, 64, 40})}, {4}, {0});
  EXPECT_EQ(l3.kernel.tile_dim, 1);
  EXPECT_EQ(l3.kernel.tile_vec, 4);
  EXPECT_EQ(l3.kernel.access, (std::vector<Access>{Access::kLinear, Access::kTile}));
  // Rows of 12 (under 16): no tiles, the strided site loads element by element.
  auto narrow = Body(R"(graph(%y: f32[64,12], %x: f32[12,64]) {
      %p: f32[64,12] = permute(%x) {dims=[1,0]}
      %z: f32[64,12] = add(%y, %p)
      return(%z)
    })");
  auto nix = AnalyzeIndexing(*narrow);
  ASSERT_TRUE(nix.ok()) << nix.status();
  LaunchLayout n = ComputeLayout(*nix, {View({64, 12}), View({12, 64})}, {4}, {0});
  EXPECT_EQ(n.kernel.tile_dim, -1);
  EXPECT_EQ(n.kernel.access, (std::vector<Access>{Access::kLinear, Access::kStrided}));
  // Contiguous along a dim of 8 only: no tiles either.
  auto short_dim = Body(R"(graph(%y: f32[8,64], %x: f32[64,8]) {
      %p: f32[8,64] = permute(%x) {dims=[1,0]}
      %z: f32[8,64] = add(%y, %p)
      return(%z)
    })");
  auto six = AnalyzeIndexing(*short_dim);
  ASSERT_TRUE(six.ok()) << six.status();
  EXPECT_EQ(ComputeLayout(*six, {View({8, 64}), View({64, 8})}, {4}, {0}).kernel.tile_dim, -1);
}

TEST(IndexingTest, RejectsOutputsOfDifferentShapes) {
  auto g = Body(R"(graph(%x: f32[4,8], %b: f32[8]) {
      %y: f32[4,8] = add(%x, %b)
      %c: f32[8] = neg(%b)
      return(%y, %c)
    })");
  EXPECT_FALSE(AnalyzeIndexing(*g).ok());
}

TEST(IndexingTest, CatOperandsAreGuardedAndShiftedAndTheirDimStaysApart) {
  auto g = Body(R"(graph(%x: f32[4,6,8]) {
      %a: f32[4,6,4] = slice(%x) {dim=2, start=4, end=8, step=1}
      %n: f32[4,6,4] = neg(%a)
      %b: f32[4,6,4] = slice(%x) {dim=2, start=0, end=4, step=1}
      %c: f32[4,6,8] = cat(%n, %b) {dim=2}
      return(%c)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  ASSERT_EQ(ix->sites.size(), 2u);
  // First operand: x[..., 4 + j] where j < 4; second: x[..., j - 4] where 4 <= j < 8.
  EXPECT_EQ(ix->sites[0].map.offsets, (std::vector<int64_t>{0, 0, 4}));
  EXPECT_EQ(ix->sites[0].map.guards, (std::vector<Guard>{{2, 0, 4}}));
  EXPECT_EQ(ix->sites[1].map.offsets, (std::vector<int64_t>{0, 0, -4}));
  EXPECT_EQ(ix->sites[1].map.guards, (std::vector<Guard>{{2, 4, 8}}));
  ASSERT_EQ(ix->observed.size(), 1u);
  EXPECT_EQ(ix->observed.begin()->first, 2);
  LaunchLayout l = ComputeLayout(*ix, {View({4, 6, 8})}, {4}, {0});
  // The two leading dims merge; the observed last one stays a dim of its own.
  EXPECT_EQ(l.sizes, (std::vector<int64_t>{24, 8}));
  EXPECT_EQ(l.kernel.observed_pos, (std::vector<int>{1}));
  EXPECT_EQ(l.kernel.vec, 4);  // boundaries at 4: vectors of 4 do not straddle them
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{4, -4}));
  EXPECT_EQ(l.kernel.access, (std::vector<Access>{Access::kLinear, Access::kLinear}));
  // A boundary at 5 (x[..., 3:] then x[..., :3]): it splits the second vector of a row, so
  // both sites load element by element (each lane tests its own index); stores stay vectors.
  auto odd = Body(R"(graph(%x: f32[4,8]) {
      %a: f32[4,3] = slice(%x) {dim=1, start=0, end=3, step=1}
      %b: f32[4,5] = slice(%x) {dim=1, start=3, end=8, step=1}
      %c: f32[4,8] = cat(%b, %a) {dim=1}
      return(%c)
    })");
  auto oix = AnalyzeIndexing(*odd);
  ASSERT_TRUE(oix.ok());
  LaunchLayout ol = ComputeLayout(*oix, {View({4, 8})}, {4}, {0});
  EXPECT_EQ(ol.kernel.vec, 4);
  EXPECT_EQ(ol.kernel.access, (std::vector<Access>{Access::kLanes, Access::kLanes}));
  EXPECT_NE(ol.kernel.Signature().find("EE"), std::string::npos) << ol.kernel.Signature();
  // Rows the vectors do not divide: no vectors.
  auto seven = Body(R"(graph(%x: f32[4,7]) {
      %a: f32[4,3] = slice(%x) {dim=1, start=0, end=3, step=1}
      %b: f32[4,4] = slice(%x) {dim=1, start=3, end=7, step=1}
      %c: f32[4,7] = cat(%b, %a) {dim=1}
      return(%c)
    })");
  auto six = AnalyzeIndexing(*seven);
  ASSERT_TRUE(six.ok());
  EXPECT_EQ(ComputeLayout(*six, {View({4, 7})}, {4}, {0}).kernel.vec, 1);
}

TEST(IndexingTest, CatReadAtAFixedIndexReadsOneOperandOnly) {
  // stack((x, y), 0)[1]: the select fixes the cat index, so only y is loaded.
  auto g = Body(R"(graph(%x: f32[4,8], %y: f32[4,8]) {
      %a: f32[1,4,8] = unsqueeze(%x) {dim=0}
      %b: f32[1,4,8] = unsqueeze(%y) {dim=0}
      %c: f32[2,4,8] = cat(%a, %b) {dim=0}
      %s: f32[1,4,8] = slice(%c) {dim=0, start=1, end=2, step=1}
      %z: f32[4,8] = squeeze(%s) {dims=[0]}
      return(%z)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  ASSERT_EQ(ix->sites.size(), 1u);
  EXPECT_EQ(ix->sites[0].input, 1);
  EXPECT_TRUE(ix->sites[0].map.guards.empty());
  EXPECT_FALSE(ix->sites[0].map.HasOffset());
  EXPECT_TRUE(ix->observed.empty());
}

TEST(IndexingTest, PointwiseOutputsFollowChannelsLastInputs) {
  // x * gamma + shortcut over NCHW sizes whose data is laid out NHWC (channels last).
  auto g = Body(R"(graph(%x: f32[2,8,5,6], %g: f32[8,1,1], %s: f32[2,8,5,6]) {
      %m: f32[2,8,5,6] = mul(%x, %g)
      %y: f32[2,8,5,6] = add(%m, %s)
      return(%y)
    })");
  auto ix = AnalyzeIndexing(*g);
  ASSERT_TRUE(ix.ok()) << ix.status();
  const std::vector<int64_t> sizes = {2, 8, 5, 6};
  const std::vector<int> nhwc = {0, 2, 3, 1};
  const TensorView cl{sizes, StridesInOrder(sizes, nhwc), 0, 4};
  EXPECT_EQ(cl.strides, (std::vector<int64_t>{240, 1, 48, 8}));
  const TensorView gamma = View({8, 1, 1});
  EXPECT_EQ(DomainOrder(*ix, {cl, gamma, cl}), nhwc);
  // In that order every full-size site is read at the flat index: vector loads and stores.
  LaunchLayout l = ComputeLayout(*ix, {cl, gamma, cl}, {4}, {0});
  EXPECT_EQ(l.kernel.vec, 4);
  int linear = 0;
  for (Access a : l.kernel.access) linear += a == Access::kLinear;
  EXPECT_EQ(linear, 2) << l.kernel.Signature();
  // Contiguous inputs keep the domain's order; where inputs disagree the first full-size
  // site's layout wins, as in eager.
  const TensorView nchw = View(sizes);
  EXPECT_EQ(DomainOrder(*ix, {nchw, gamma, nchw}), (std::vector<int>{0, 1, 2, 3}));
  const int x_site = ix->sites[0].input;
  const std::vector<int> want = x_site == 0 ? nhwc : std::vector<int>{0, 1, 2, 3};
  EXPECT_EQ(DomainOrder(*ix, {cl, gamma, nchw}), want);
  // Size-1 dims and a broadcast input tell nothing: they keep the domain's order.
  auto b = Body(R"(graph(%x: f32[1,8], %y: f32[4,8]) {
      %z: f32[4,8] = add(%x, %y)
      return(%z)
    })");
  auto bix = AnalyzeIndexing(*b);
  ASSERT_TRUE(bix.ok());
  EXPECT_EQ(DomainOrder(*bix, {View({1, 8}), View({4, 8})}), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace torchfuse::codegen
