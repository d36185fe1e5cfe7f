// Test helper: a model the importer must refuse, with one error line that names the node at fault
// and says what is wrong.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "importer/importer.h"
#include "unit/onnx_builder.h"

namespace fusetune::testing {

inline void expect_refused(const OnnxBuilder& bad, const std::string& node, const std::string& what) {
  try {
    importer::import_onnx_bytes(bad.bytes(), ".");
    ADD_FAILURE() << "accepted: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(node), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace fusetune::testing
