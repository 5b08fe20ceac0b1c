#include "codegen_nvrtc/column_kernel.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen_nvrtc/nvrtc_compiler.h"
#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"

namespace torchfuse::codegen {
namespace {

// The body of the single column group that the pipeline makes of `text`.
class ColumnKernelTest : public ::testing::Test {
 protected:
  const graph::Graph& Body(const std::string& text) {
    auto g = graph::ParseGraph(text);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(fusion::RunFusionPipeline(g->get()).ok());
    graph_ = std::move(*g);
    for (const auto& n : graph_->nodes()) {
      if (n->kind() == graph::OpKind::kFusionGroup && IsColumnGroupBody(*n->body())) {
        return *n->body();
      }
    }
    ADD_FAILURE() << "no column group in\n" << graph::PrintGraph(*graph_);
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

  static ColumnLaunch Launch(const graph::Graph& body, const ColumnIndexing& ix,
                             const std::vector<TensorView>& views) {
    std::vector<int> sizes;
    for (const auto* v : body.outputs()) sizes.push_back(graph::DTypeSize(v->type().dtype));
    return ComputeColumnLaunch(ix, views, sizes, std::vector<uintptr_t>(sizes.size(), 256));
  }

  std::unique_ptr<graph::Graph> graph_;
};

std::string Sum0(const std::string& dtype, const std::string& shape, const std::string& out) {
  return "graph(%x: " + dtype + "[" + shape + "]) {\n  %s: " + dtype + "[" + out +
         "] = sum(%x) {dims=[0], keepdim=0}\n  return(%s)\n}\n";
}

// Bias-gradient style: a gelu prologue stored for a matmul, the column sum, a cast epilogue.
std::string GeluBias(const std::string& dtype) {
  return "graph(%g: " + dtype + "[96,40], %x: " + dtype + "[96,40], %w: " + dtype + "[40,8]) {\n"
         "  %d: " + dtype + "[96,40] = gelu(%x)\n"
         "  %p: " + dtype + "[96,40] = mul(%g, %d)\n"
         "  %pf: f32[96,40] = cast(%p) {dtype=\"f32\"}\n"
         "  %s: f32[40] = sum(%pf) {dims=[0], keepdim=0}\n"
         "  %h: f32[40] = mul(%s, %s)\n"
         "  %mm: " + dtype + "[96,8] = matmul(%p, %w)\n"
         "  return(%h, %mm)\n}\n";
}

// Several reductions of one input over two leading dims, keepdim and not, with a parameter
// read only after the reductions.
std::string Stats(const std::string& dtype) {
  return "graph(%x: " + dtype + "[6,5,24]) {\n"
         "  %w: " + dtype + "[24] = param() {name=\"w\"}\n"
         "  %s: " + dtype + "[24] = sum(%x) {dims=[0,1], keepdim=0}\n"
         "  %m: " + dtype + "[1,1,24] = mean(%x) {dims=[0,1], keepdim=1}\n"
         "  %a: " + dtype + "[24] = amax(%x) {dims=[0,1], keepdim=0}\n"
         "  %b: " + dtype + "[24] = amin(%x) {dims=[1,0], keepdim=0}\n"
         "  %t: " + dtype + "[24] = mul(%a, %w)\n"
         "  return(%s, %m, %t, %b)\n}\n";
}

TEST_F(ColumnKernelTest, AnalysisFindsReductionsSitesAndOutputKinds) {
  const graph::Graph& body = Body(GeluBias("f32"));
  auto ix = AnalyzeColumnIndexing(body);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ix->domain, (std::vector<int64_t>{96, 40}));
  EXPECT_EQ(ix->reduced, (std::vector<bool>{true, false}));
  EXPECT_EQ(ix->reduced_count, 96);
  ASSERT_EQ(ix->reductions.size(), 1u);
  EXPECT_EQ(ix->sites.size(), 2u);  // g and x, per element
  for (bool e : ix->site_per_element) EXPECT_TRUE(e);
  // The sum's epilogue per column, the gelu product per element.
  ASSERT_EQ(ix->output_per_column.size(), 2u);
  EXPECT_NE(ix->output_per_column[0], ix->output_per_column[1]);

  const graph::Graph& stats = Body(Stats("f32"));
  auto sx = AnalyzeColumnIndexing(stats);
  ASSERT_TRUE(sx.ok()) << sx.status();
  EXPECT_EQ(sx->reductions.size(), 4u);
  EXPECT_EQ(sx->reduced_count, 30);
  EXPECT_EQ(sx->output_per_column, (std::vector<bool>{true, true, true, true}));
  int per_column_sites = 0;
  for (bool e : sx->site_per_element) per_column_sites += !e;
  EXPECT_EQ(per_column_sites, 1);  // the parameter, read after the reductions
}

TEST_F(ColumnKernelTest, AReducedValueBroadcastBackIsRejected) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[16,8]) {
      %m: f32[1,8] = mean(%x) {dims=[0], keepdim=1}
      %d: f32[16,8] = sub(%x, %m)
      %s: f32[8] = sum(%d) {dims=[0], keepdim=0}
      return(%s)
    })");
  ASSERT_TRUE(g.ok());
  auto ix = AnalyzeColumnIndexing(**g);
  ASSERT_FALSE(ix.ok());
  EXPECT_NE(ix.status().message().find("broadcast back"), std::string::npos) << ix.status();
}

TEST_F(ColumnKernelTest, LaunchCollapsesDimsAndPicksVectorWidth) {
  const graph::Graph& body = Body(Stats("f32"));
  auto ix = AnalyzeColumnIndexing(body);
  ASSERT_TRUE(ix.ok()) << ix.status();
  ColumnLaunch l = Launch(body, *ix, Contiguous(body));
  EXPECT_EQ(l.rows, 30);
  EXPECT_EQ(l.columns, 24);
  EXPECT_EQ(l.reduced_sizes, std::vector<int64_t>{30});  // [6, 5] merged
  EXPECT_EQ(l.kept_sizes, std::vector<int64_t>{24});
  EXPECT_EQ(l.layout.vec, 4);
  EXPECT_TRUE(l.layout.index32);
  // Rows 32 apart (a slice of a wider tensor): still one reduced dim, vectors still fit.
  std::vector<TensorView> sliced = Contiguous(body);
  sliced[0].strides = {160, 32, 1};
  ColumnLaunch s = Launch(body, *ix, sliced);
  EXPECT_EQ(s.reduced_sizes, std::vector<int64_t>{30});
  EXPECT_EQ(s.layout.vec, 4);
  // Rows 25 apart and a misaligned start: scalar access.
  sliced[0].strides = {125, 25, 1};
  EXPECT_EQ(Launch(body, *ix, sliced).layout.vec, 1);
  // Transposed (columns strided): scalar, strided access; reduced dims no longer merge.
  std::vector<TensorView> transposed = Contiguous(body);
  transposed[0].strides = {1, 6, 30};
  ColumnLaunch t = Launch(body, *ix, transposed);
  EXPECT_EQ(t.layout.vec, 1);
  EXPECT_EQ(t.layout.reduced_rank, 2);
  EXPECT_NE(std::find(t.layout.access.begin(), t.layout.access.end(), RowAccess::kStrided),
            t.layout.access.end());
}

TEST_F(ColumnKernelTest, TallInputsSplitAndVariantsRoundTrip) {
  const RowDevice h100{90, 132};
  // GPT-2's bias gradient: 8192 rows of 768 bf16 columns.
  ColumnVariant v = ChooseColumnVariant(8192, 768, 8, h100);
  EXPECT_EQ(v.threads_x, 32);
  EXPECT_GT(v.split, 8);
  EXPECT_GE(8192 / v.split, v.threads_y * 8);  // each row lane reduces enough rows
  // Few rows: no split.
  EXPECT_EQ(ChooseColumnVariant(16, 768, 8, h100).split, 1);
  // One column: narrow blocks of many row lanes.
  ColumnVariant one = ChooseColumnVariant(100000, 1, 1, h100);
  EXPECT_EQ(one.threads_x, 1);
  EXPECT_GT(one.threads_y, 32);
  for (const ColumnVariant& c : ColumnVariantSpace(8192, 768, 8, h100)) {
    auto parsed = ParseColumnVariant(c.Signature());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, c);
    EXPECT_LE(c.block_size(), 1024);
  }
  EXPECT_GT(ColumnVariantSpace(8192, 768, 8, h100).size(), 3u);
  EXPECT_FALSE(ParseColumnVariant("col_x3_y8_s1").ok());
  EXPECT_FALSE(ParseColumnVariant("col_x32_y64_s1").ok());
  EXPECT_FALSE(ParseColumnVariant("block_t256").ok());
}

TEST_F(ColumnKernelTest, ScratchFitsEveryVariant) {
  const graph::Graph& body = Body(Stats("f32"));
  auto ix = AnalyzeColumnIndexing(body);
  ASSERT_TRUE(ix.ok());
  std::vector<ColumnVariant> vs = {{32, 8, 1}, {32, 8, 16}, {8, 32, 4}};
  ColumnScratch s = ColumnScratchFor(*ix, 24, 4, vs);
  EXPECT_EQ(s.workspace_bytes, 4 * 16 * 24 * 4);  // 4 reductions, 16 splits, f32
  EXPECT_EQ(s.counters, 1);                        // 24 columns / 4 per lane fit one tile
}

TEST_F(ColumnKernelTest, NvrtcCompilesEveryDtypeLayoutAndVariant) {
  int compiled = 0;
  for (const std::string& dt : std::vector<std::string>{"f32", "f16", "bf16", "f64"}) {
    for (const std::string& text :
         {Sum0(dt, "4096,1024", "1024"), Sum0(dt, "7,3,5", "3,5"), GeluBias(dt), Stats(dt)}) {
      const graph::Graph& body = Body(text);
      auto ix = AnalyzeColumnIndexing(body);
      ASSERT_TRUE(ix.ok()) << ix.status() << "\n" << text;
      for (bool transposed : {false, true}) {
        std::vector<TensorView> views = Contiguous(body);
        if (transposed) std::swap(views[0].strides[0], views[0].strides.back());
        ColumnLaunch l = Launch(body, *ix, views);
        for (const ColumnVariant& v : {ColumnVariant{32, 8, 4}, ColumnVariant{1, 256, 1}}) {
          auto src = EmitColumnKernel(body, *ix, l.layout, v, "t");
          ASSERT_TRUE(src.ok()) << src.status();
          EXPECT_NE(src->source.find("atomicAdd(&counters"), std::string::npos);
          EXPECT_EQ(src->source.find("atomicAdd(&ws"), std::string::npos);  // no float atomics
          auto image = CompileCuda(src->source, src->name, 90);
          ASSERT_TRUE(image.ok()) << image.status() << "\n" << text << " " << v.Signature();
          ++compiled;
        }
      }
    }
  }
  EXPECT_EQ(compiled, 4 * 4 * 2 * 2);
}

TEST_F(ColumnKernelTest, SourceIsDeterministicAndCarriesNoRowCount) {
  const graph::Graph& body = Body(Sum0("f32", "4096,1024", "1024"));
  auto ix = AnalyzeColumnIndexing(body);
  ASSERT_TRUE(ix.ok());
  ColumnLaunch l = Launch(body, *ix, Contiguous(body));
  auto a = EmitColumnKernel(body, *ix, l.layout, ChooseColumnVariant(4096, 1024, 4, {90, 132}), "t");
  auto b = EmitColumnKernel(body, *ix, l.layout, ChooseColumnVariant(4096, 1024, 4, {90, 132}), "t");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->source, b->source);
  // The split is the launch's: variants that differ only in it share a binary.
  auto c = EmitColumnKernel(body, *ix, l.layout, ColumnVariant{32, 8, 1}, "t");
  auto d = EmitColumnKernel(body, *ix, l.layout, ColumnVariant{32, 8, 64}, "t");
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(c->source, d->source);
}

}  // namespace
}  // namespace torchfuse::codegen
