// Error: the one exception type fusetune's passes throw for bad input or unsupported models.
//
// Its message always names the culprit (file, node, op, input, field) so that a command-line user
// sees one clear line. Command-line entry points and service request handlers catch it at their
// boundary; nothing below them prints or exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace fusetune {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Builds a message from streamable parts: fail("node '", name, "': bad axis ", axis).
template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  throw Error(out.str());
}

// Throws Error with the message when cond is false.
template <typename... Parts>
void check(bool cond, Parts&&... parts) {
  if (!cond) fail(std::forward<Parts>(parts)...);
}

}  // namespace fusetune
