// The safetensors rule on where tensors lie (huggingface/safetensors: Metadata::validate and
// SafeTensors::read_metadata): the tensors' data_offsets, taken in order, tile the data section from
// its first byte to the file's last, without holes or overlaps. Its own reader refuses a file with
// bytes after the last tensor (MetadataIncompleteBuffer) or a gap or overlap between two
// (InvalidOffset): a hole is where a second file could hide. dp refuses the same files.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace dp {

// RuntimeError "PATH: not a valid safetensors file: ..." naming the first tensor out of place, or
// the bytes after the last one. `data_bytes`: the file's size after its 8-byte length and header.
// Tensors that run past the end (a truncated file) are left to the readers, which name them.
void check_safetensors_tiling(const nlohmann::json& header, uint64_t data_bytes, const std::string& path);

}  // namespace dp
