// SHA-256 (FIPS 180-4) of a byte string, as lowercase hex. Used for signatures and content digests.
#pragma once

#include <string>
#include <string_view>

namespace fusetune {

std::string sha256_hex(std::string_view data);

}  // namespace fusetune
