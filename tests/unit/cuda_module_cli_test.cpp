// The CUDA backend as a module loaded on first use (issue #50, start-up): the hypic binary links
// no CUDA library, the light commands never open the module, a command that asks for the CUDA
// device does, and a module that cannot be loaded is one line naming its path and why.
// Observed through the dynamic loader itself (LD_DEBUG=files lists every object it maps,
// dlopen included), not through timings.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_test_util.hpp"
#include "hypic/kernels/device.hpp"
#include "temp_path.hpp"

namespace {
namespace cuda_module_cli_test {
using cli_test::CliRun;
using test_util::TempDir;

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// The libraries a CUDA build's module links, and the module itself.
const char* const kCudaLibraries[] = {"libcudart", "libcublas", "libnccl", "libhypic_cuda"};

TEST(CudaModuleCli, TheBinaryLinksNoCudaLibrary) {
  TempDir tmp("hypic-cudamod");
  const CliRun r = cli_test::run_shell(tmp.file(""), std::string("ldd ") + HYPIC_BINARY);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(has(r.out, "libc.so")) << r.out;  // ldd listed the binary's libraries
  for (const char* lib : kCudaLibraries) EXPECT_FALSE(has(r.out, lib)) << lib << "\n" << r.out;
}

TEST(CudaModuleCli, LightCommandsDoNotOpenTheModule) {
  TempDir tmp("hypic-cudamod");
  const std::string run = cli_test::clean_mpi_environment() + " LD_DEBUG=files " + HYPIC_BINARY;
  const std::string data = HYPIC_TEST_DATA_DIR;
  for (const std::string& args :
       {std::string("tokenize --model ") + data + "/tokenizer/tokenizer.json --text hi",
        "model info --config " + data + "/configs/qwen3.5-35b-a3b.json",
        "inspect --store " + tmp.file("none.h5"), std::string("--version")}) {
    const CliRun r = cli_test::run_shell(tmp.file(""), run + " " + args);
    ASSERT_TRUE(has(r.err, "file=")) << "LD_DEBUG gave no loader trace: " << r.err;
    for (const char* lib : kCudaLibraries) EXPECT_FALSE(has(r.err, lib)) << args << ": " << lib;
  }
  // Nor does a command told to compute on the host.
  std::ofstream(tmp.file("ids.json")) << "[1, 2, 3]";
  const std::string model =
      std::string(HYPIC_TEST_DATA_DIR) + "/../../inputs/models/qwen3_5-synthqa";
  const CliRun cpu = cli_test::run_shell(
      tmp.file(""), run + " forward --device cpu --threads 1 --model " + model + " --input-ids " +
                        tmp.file("ids.json") + " --out " + tmp.file("o.h5"));
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  for (const char* lib : kCudaLibraries) EXPECT_FALSE(has(cpu.err, lib)) << "forward: " << lib;
  // The same trace shows the module when a command asks for the CUDA device: `hypic info`
  // describes it (no GPU here: the runtime loads and finds no device).
  const CliRun info = cli_test::run_shell(tmp.file(""), run + " info");
  ASSERT_EQ(info.code, 0) << info.err;
  if (!hypic::kernels::cuda_device_info().compiled) {
    EXPECT_FALSE(has(info.err, "libhypic_cuda"));
    EXPECT_TRUE(has(info.out, "not compiled with CUDA")) << info.out;
    return;
  }
  EXPECT_TRUE(has(info.err, "libhypic_cuda.so")) << "hypic info did not open the CUDA module";
  EXPECT_TRUE(has(info.err, "libcudart")) << "the module brought no CUDA runtime";
  EXPECT_TRUE(has(info.out, "CUDA runtime")) << info.out;
}

TEST(CudaModuleCli, AMissingModuleIsOneLineNamingItsPath) {
  if (!hypic::kernels::cuda_device_info().compiled) GTEST_SKIP() << "built without CUDA";
  TempDir tmp("hypic-cudamod");
  const std::string path = tmp.file("nowhere/libhypic_cuda.so");
  const std::string run = "HYPIC_CUDA_MODULE=" + path + " " + HYPIC_BINARY;
  const CliRun check = cli_test::run_shell(tmp.file(""), run + " info --device-check");
  cli_test::expect_one_line_error(check, "cannot load the CUDA backend module " + path);
  EXPECT_TRUE(has(check.err, "No such file")) << "dlerror() is part of the line: " << check.err;
  // Not a module: the loader's own reason.
  const CliRun info =
      cli_test::run_shell(tmp.file(""), std::string("HYPIC_CUDA_MODULE=") + HYPIC_BINARY + " " +
                                            HYPIC_BINARY + " info");
  EXPECT_EQ(info.code, 0) << info.err;  // info describes what it finds, whatever it is
  EXPECT_TRUE(has(info.out, "CUDA   : ")) << info.out;
  EXPECT_FALSE(has(info.out, "CUDA runtime")) << info.out;
}

}  // namespace cuda_module_cli_test
}  // namespace
