// coordinator/uploads: the ledger of uploads under way, without a socket. Pieces checked and
// counted against each quota (the refusal names the quota's flag), an upload handed to its
// submission only when every piece is written and none failed, idle uploads dropped, and the
// files a Submit carries staged as an upload's are.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "coordinator/uploads.h"
#include "storage/job_queue.h"
#include "unit/test_dir.h"

namespace fusetune::coordinator {
namespace {

namespace fs = std::filesystem;

class UploadsTest : public ::testing::Test {
 protected:
  static wire::Upload piece(const std::string& name, const std::string& path, uint64_t offset, const std::string& data) {
    wire::Upload u;
    u.set_upload(name);
    u.set_path(path);
    u.set_offset(offset);
    u.set_data(data);
    return u;
  }
  static std::string refusal(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  const fusetune::testing::TestDir dir_{"uploads"};
  const fs::path db_ = dir_ / "search.db";
  const Uploads::Clock::time_point t0_ = Uploads::Clock::now();
};

TEST_F(UploadsTest, PiecesLandInsideTheUploadAndAreHandedOverOnceWritten) {
  Uploads uploads(db_, {1000, 1000, 1000});
  const Uploads::Piece a = uploads.accept("client", piece("m1", "model.onnx", 0, "abcd"), 0, t0_);
  EXPECT_TRUE(a.fresh);
  EXPECT_EQ(a.file, a.dir / "model.onnx");
  EXPECT_EQ(a.dir.parent_path(), storage::JobQueue::staging_dir(db_));
  const Uploads::Piece b = uploads.accept("client", piece("m1", "weights/w.bin", 0, "xyz"), 0, t0_);
  EXPECT_FALSE(b.fresh);
  EXPECT_EQ(b.file, a.dir / "weights" / "w.bin");
  Uploads::write_piece(a.file, 0, "abcd");
  Uploads::write_piece(b.file, 0, "xyz");
  uploads.written(a.key);
  // One piece still being written: the submission must wait for its acknowledgement.
  EXPECT_NE(refusal([&] { uploads.take("client", "m1"); }).find("still has 1 pieces being written"), std::string::npos);
  uploads.written(b.key);
  // Another client's upload of the same name is another upload.
  EXPECT_NE(refusal([&] { uploads.take("other", "m1"); }).find("no upload 'm1' from this client"), std::string::npos);
  const Staged st = uploads.take("client", "m1");
  EXPECT_EQ(st.dir, a.dir);
  EXPECT_EQ(st.received.at("model.onnx"), 4u);
  EXPECT_EQ(st.received.at("weights/w.bin"), 3u);
  EXPECT_EQ(read_file(st.dir / "weights" / "w.bin", "piece"), "xyz");
  EXPECT_NE(refusal([&] { uploads.take("client", "m1"); }).find("no upload"), std::string::npos) << "taken twice";
}

TEST_F(UploadsTest, NamesPathsAndOffsetsFromThePeerAreChecked) {
  Uploads uploads(db_, {1000, 1000, 1000});
  EXPECT_NE(refusal([&] { uploads.accept("c", piece("a/b", "m.onnx", 0, "x"), 0, t0_); }).find("upload: name 'a/b'"),
            std::string::npos);
  EXPECT_NE(refusal([&] { uploads.accept("c", piece("", "m.onnx", 0, "x"), 0, t0_); }).find("upload: name ''"), std::string::npos);
  EXPECT_NE(refusal([&] { uploads.accept("c", piece("m", "../escape", 0, "x"), 0, t0_); }).find("upload: file"),
            std::string::npos);
  EXPECT_NE(refusal([&] { uploads.accept("c", piece("m", "/etc/passwd", 0, "x"), 0, t0_); }).find("upload: file"),
            std::string::npos);
  EXPECT_NE(refusal([&] { uploads.accept("c", piece("m", "m.onnx", Uploads::kMaxFile, "x"), 0, t0_); })
                .find("is beyond the largest file taken"),
            std::string::npos);
  // Nothing refused became an upload.
  EXPECT_NE(refusal([&] { uploads.take("c", "m"); }).find("no upload"), std::string::npos);
}

TEST_F(UploadsTest, EachQuotaRefusesWhatWouldPassItAndNamesItsFlag) {
  Uploads uploads(db_, {10, 15, 40});
  uploads.accept("c1", piece("a", "m.onnx", 0, std::string(8, 'x')), 0, t0_);
  // The job's files: 8 + 4 bytes would pass 10.
  EXPECT_NE(refusal([&] { uploads.accept("c1", piece("a", "w.bin", 0, "1234"), 0, t0_); }).find("(--max-upload-gb)"),
            std::string::npos);
  // A piece rewritten over bytes already counted costs nothing more; one far past the end counts
  // the whole gap.
  uploads.accept("c1", piece("a", "m.onnx", 0, std::string(8, 'y')), 0, t0_);
  EXPECT_NE(refusal([&] { uploads.accept("c1", piece("a", "m.onnx", 10, "z"), 0, t0_); }).find("11 bytes would pass"),
            std::string::npos);
  // The client's uploads under way: 8 + 8 would pass 15.
  EXPECT_NE(refusal([&] { uploads.accept("c1", piece("b", "m.onnx", 0, std::string(8, 'x')), 0, t0_); })
                .find("(--max-client-upload-gb)"),
            std::string::npos);
  // The store: 30 stored + 8 under way + 8 would pass 40, whoever asks.
  EXPECT_NE(refusal([&] { uploads.accept("c2", piece("c", "m.onnx", 0, std::string(8, 'x')), 30, t0_); })
                .find("(--max-store-gb)"),
            std::string::npos);
  // A refused first piece leaves no upload behind.
  EXPECT_NE(refusal([&] { uploads.take("c2", "c"); }).find("no upload"), std::string::npos);
  // An inline submission is counted the same way.
  EXPECT_NE(refusal([&] { uploads.check_quotas("c1", "(inline)", 0, 11, 0); }).find("(--max-upload-gb)"), std::string::npos);
}

TEST_F(UploadsTest, AFailedPieceFailsItsUploadAndIdleUploadsAreDropped) {
  Uploads uploads(db_, {1000, 1000, 1000});
  const Uploads::Piece a = uploads.accept("c", piece("a", "m.onnx", 0, "x"), 0, t0_);
  uploads.failed(a.key, "disk full");
  EXPECT_NE(refusal([&] { uploads.accept("c", piece("a", "m.onnx", 1, "y"), 0, t0_); }).find("failed before: disk full"),
            std::string::npos);
  EXPECT_NE(refusal([&] { uploads.take("c", "a"); }).find("'a' failed: disk full"), std::string::npos);

  const Uploads::Piece b = uploads.accept("c", piece("b", "m.onnx", 0, "x"), 0, t0_);
  const Uploads::Piece c = uploads.accept("c", piece("c", "m.onnx", 0, "x"), 0, t0_ + std::chrono::minutes(5));
  uploads.written(b.key);
  uploads.written(c.key);
  EXPECT_TRUE(uploads.drop_idle(t0_ + Uploads::kIdle - std::chrono::seconds(1)).empty());
  // a (failed) and b are idle for kIdle; c came later; a piece still being written is never dropped.
  const Uploads::Piece d = uploads.accept("c", piece("d", "m.onnx", 0, "x"), 0, t0_);
  const auto dropped = uploads.drop_idle(t0_ + Uploads::kIdle);
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[0].first, a.key);
  EXPECT_EQ(dropped[1].first, b.key);
  EXPECT_EQ(dropped[1].second, b.dir);
  uploads.written(d.key);
  EXPECT_EQ(uploads.take("c", "c").dir, c.dir);
}

TEST_F(UploadsTest, AnInlineSubmissionIsStagedAsAnUploadWouldBe) {
  wire::Submit s;
  wire::ModelFile& f = *s.add_files();
  f.set_path("sub/model.onnx");
  f.set_data("onnx bytes");
  const Staged st = stage_inline(db_, s);
  EXPECT_EQ(st.dir.parent_path(), storage::JobQueue::staging_dir(db_));
  EXPECT_EQ(read_file(st.dir / "sub" / "model.onnx", "staged"), "onnx bytes");
  EXPECT_EQ(st.received.at("sub/model.onnx"), 10u);
  EXPECT_EQ(s.files(0).size(), 10u);
  EXPECT_TRUE(s.files(0).data().empty()) << "the data stays in the file, not in the Submit";
  wire::Submit escape;
  escape.add_files()->set_path("../out.onnx");
  EXPECT_NE(refusal([&] { stage_inline(db_, escape); }).find("submit: model file"), std::string::npos);
}

}  // namespace
}  // namespace fusetune::coordinator
