// Client: requests to a coordinator over a DEALER socket (the CLI's submit, status, cancel and
// export). Takes an endpoint and a timeout; request() sends an Envelope and returns the
// coordinator's reply, throwing Error when none arrives in time (naming the endpoint) or when the
// coordinator answers with an error (its message). upload() sends a model's files in pieces of
// wire::kUploadChunk, a few in flight at once, each acknowledged once the coordinator wrote it:
// a model of any size travels without a message over 2 GB and without being held whole in memory
// on either side; a Submit naming the upload follows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "fusetune_proto/service.pb.h"
#include "proto/curve.h"

namespace fusetune::coordinator {

// A model's file to upload: its path relative to the model's directory, and where it is here.
struct UploadFile {
  std::string path;
  std::filesystem::path local;
};

class Client {
 public:
  Client(zmq::context_t& context, const std::string& endpoint, int timeout_ms = 30000,
         const wire::ClientSecurity& security = {});
  wire::Envelope request(wire::Envelope e);
  // Sends `files` as upload `name`; `progress` (optional) hears the bytes acknowledged so far and
  // the total. Returns each file as the Submit names it (path and size, no data).
  std::vector<wire::ModelFile> upload(const std::string& name, const std::vector<UploadFile>& files,
                                      const std::function<void(uint64_t done, uint64_t total)>& progress = {});

 private:
  wire::Envelope receive();

  zmq::socket_t socket_;
  std::string endpoint_;
  int timeout_ms_;
};

}  // namespace fusetune::coordinator
