#include "cluster/lifeline.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace hypic::cluster {
namespace {

std::mutex g_listener_mutex;
int g_listener_fd = -1;
uint16_t g_listener_port = 0;

std::string errno_text(int e) {
  return std::strerror(e);
}

}  // namespace

uint16_t lifeline_port() {
  std::lock_guard<std::mutex> lock(g_listener_mutex);
  if (g_listener_fd >= 0) return g_listener_port;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 0;
  }
  g_listener_fd = fd;
  g_listener_port = ntohs(addr.sin_port);
  return g_listener_port;
}

void close_lifeline_listener() {
  std::lock_guard<std::mutex> lock(g_listener_mutex);
  if (g_listener_fd >= 0) ::close(g_listener_fd);
  g_listener_fd = -1;
  g_listener_port = 0;
}

const char* lifeline_state_name(LifelineState s) {
  switch (s) {
    case LifelineState::kConnecting:
      return "connecting";
    case LifelineState::kAlive:
      return "alive";
    case LifelineState::kClosed:
      return "closed";
    case LifelineState::kLost:
      return "lost";
    case LifelineState::kUnavailable:
      return "unavailable";
  }
  return "?";
}

Lifeline::Lifeline(const std::string& host, uint16_t port, KeepAlive ka)
    : where_(host + ":" + std::to_string(port)) {
  if (port == 0) {
    problem_ = where_ + ": the worker has no lifeline listener";
    return;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    problem_ = "cannot resolve host '" + host + "': " + ::gai_strerror(rc);
    if (found != nullptr) ::freeaddrinfo(found);
    return;
  }
  sockaddr_in addr{};
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  ::freeaddrinfo(found);
  addr.sin_port = htons(port);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  where_ = host + " (" + text + ":" + std::to_string(port) + ")";

  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    problem_ = where_ + ": socket: " + errno_text(errno);
    return;
  }
  const int on = 1;
  if (::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0 ||
      ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &ka.idle_s, sizeof ka.idle_s) != 0 ||
      ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &ka.interval_s, sizeof ka.interval_s) != 0 ||
      ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &ka.count, sizeof ka.count) != 0) {
    problem_ = where_ + ": TCP keep-alive settings refused: " + errno_text(errno);
    ::close(fd_);
    fd_ = -1;
    return;
  }
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    state_ = LifelineState::kAlive;
  } else if (errno == EINPROGRESS) {
    state_ = LifelineState::kConnecting;
  } else {
    // A refused or failed connect says nothing certain about the worker (a firewall can do
    // it): the worker is then watched as one without a lifeline.
    problem_ = where_ + ": connect: " + errno_text(errno);
    ::close(fd_);
    fd_ = -1;
  }
}

Lifeline::~Lifeline() {
  if (fd_ >= 0) ::close(fd_);
}

LifelineState Lifeline::poll() {
  if (state_ == LifelineState::kConnecting) {
    pollfd p{fd_, POLLOUT, 0};
    const int n = ::poll(&p, 1, 0);
    if (n <= 0) return state_;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0) {
      state_ = LifelineState::kAlive;
    } else {
      problem_ = where_ + ": connect: " + errno_text(err);
      state_ = LifelineState::kUnavailable;  // as above: not proof of a death
      ::close(fd_);
      fd_ = -1;
    }
    return state_;
  }
  if (state_ != LifelineState::kAlive) return state_;
  char byte = 0;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return state_;  // the worker never writes; harmless if it does
  if (n == 0) {
    problem_ = where_ + ": closed by the worker's host";
    state_ = LifelineState::kClosed;
    return state_;
  }
  const int e = errno;
  if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) return state_;
  problem_ = where_ + ": " + errno_text(e);
  state_ = (e == ECONNRESET || e == EPIPE || e == ECONNABORTED) ? LifelineState::kClosed
                                                                : LifelineState::kLost;
  return state_;
}

bool lifeline_broken(int fd) {
  if (fd < 0) return false;
  const int saved = errno;
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  const int e = errno;
  errno = saved;
  if (n >= 0) return n == 0;
  return !(e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ENOTCONN);
}

bool lifeline_silent(int fd) {
  if (fd < 0) return false;
  const int saved = errno;
  tcp_info info{};
  socklen_t len = sizeof info;
  const int rc = ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len);
  errno = saved;
  return rc == 0 && info.tcpi_probes >= 2;
}

}  // namespace hypic::cluster
