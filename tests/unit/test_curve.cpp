// CURVE key files: the secret key file is private (0600) from its creation whatever the umask,
// written whole through a new file renamed into place (a link planted at its name is replaced, not
// followed), and read back as written; nothing is left beside it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "proto/curve.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

TEST(CurveKeys, TheSecretKeyFileIsPrivateFromItsCreationWhateverTheUmask) {
  const fs::path dir = fs::temp_directory_path() / ("fusetune_keys_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const mode_t old = ::umask(0);  // the widest: a file created with the default mode would be 0666
  const wire::KeyPair keys = wire::generate_key_pair();
  wire::write_key_pair(keys, dir, "worker");
  wire::write_key_pair(keys, dir, "worker");  // written again over the first: still private
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "worker.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const wire::KeyPair back = wire::read_key_file(dir / "worker.key");
  EXPECT_EQ(back.public_key, keys.public_key);
  EXPECT_EQ(back.secret_key, keys.secret_key);
  EXPECT_EQ(wire::read_key_file(dir / "worker.pub").public_key, keys.public_key);
  EXPECT_TRUE(wire::read_key_file(dir / "worker.pub").secret_key.empty());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2) << "a temporary file was left beside the keys";
  fs::remove_all(dir);
}

// A link planted where the key file goes is replaced, never written through: the secret does not
// land in the file it points to.
TEST(CurveKeys, ALinkWhereTheKeyGoesIsReplacedNotFollowed) {
  const fs::path dir = fs::temp_directory_path() / ("fusetune_keys_link_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink(dir / "elsewhere", dir / "worker.key");
  const wire::KeyPair keys = wire::generate_key_pair();
  wire::write_key_pair(keys, dir, "worker");
  EXPECT_FALSE(fs::exists(dir / "elsewhere")) << "the secret key was written through the link";
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir / "worker.key")));
  EXPECT_EQ(wire::read_key_file(dir / "worker.key").secret_key, keys.secret_key);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fusetune
