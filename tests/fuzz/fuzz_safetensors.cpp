// A *.safetensors file: the header checks of SafetensorsFile, then every tensor read back
// (bytes, and as f32 or int32 by its dtype).
#include "fuzz_util.hpp"
#include "model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hypic_fuzz::TempFile file(".safetensors");
  const std::string& path = file.write(data, size);
  hypic_fuzz::expect_clean([&] {
    const hypic::model::SafetensorsFile f(path);
    for (const auto& item : f.tensors()) {
      const std::string& name = item.first;
      (void)f.read_bytes(name);
      hypic_fuzz::expect_clean([&] {
        if (hypic::dtype_is_float(item.second.dtype))
          (void)f.read(name);
        else
          (void)f.read_int32(name);
      });
    }
  });
  return 0;
}
