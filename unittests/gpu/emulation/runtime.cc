// The emulated CUDA runtime (cuda_runtime.h in include/): the fiber scheduler of a block, the warp and block
// synchronisation, launch faults, memory and the handler of the shared-memory bounds checks.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>


namespace pe_emu {

Thread* current_thread = nullptr;
Block current_block;

namespace {

constexpr size_t kStackBytes = 256 << 10;
// Spin-wait yields with no barrier, warp exchange or thread exit in between: a spin that can never end.
constexpr long kSpinLimit = 1 << 22;

enum State { kRunnable, kWaitBlock, kWaitWarp, kDone };

// A fiber starts once on its own stack (makecontext/setcontext) and then runs thread after thread (one per
// block it serves); switches save and restore registers only (_setjmp/_longjmp: no signal-mask syscall).
struct Fiber {
  ucontext_t ctx;
  jmp_buf jb;
  bool fresh = true;    // not started yet: the next resume enters fiber_main
  bool parked = false;  // between threads (at the end of fiber_main's loop), so reusable as it is
  char* stack = nullptr;
  State state = kDone;
  Thread thread;
  // The warp exchange it waits in.
  WarpOp op;
  unsigned mask;
  unsigned char value[16];
  int src, pred;
  const char *what, *file;
  int line;
  WarpResult result;
  // The block barrier it waits in or passed last, and what that barrier returned.
  const char* barrier_file = "the kernel's start";
  int barrier_line = 0;
  int barrier_result;
};

struct Warp {
  unsigned alive = 0, arrived = 0;
};

struct Scheduler {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  jmp_buf main_jb;
  Fiber* running = nullptr;
  size_t nthreads = 0;  // of the running block
  int alive = 0, at_barrier = 0, barrier_count = 0;
  const char *barrier_file = nullptr, *kernel = nullptr;
  int barrier_line = 0, barrier_thread = 0;  // the first thread waiting at the barrier, and where
  long spins = 0;
  unsigned epoch = 0;  // block barriers released so far: the sweep order flips with each
  bool faulted = false;
  cudaError_t fault_code = cudaSuccess;
  std::string fault_message;
  std::vector<Fiber*> ready;  // runnable fibers in the order they run, from ready[ready_head]
  size_t ready_head = 0;
  std::vector<char*> shared;  // the __shared__ variables this block has reached
  Thunk thunk = nullptr;
  void* closure = nullptr;
};
Scheduler S;

std::mutex launch_mutex;
// Launch errors (cudaGetLastError) and kernel faults (reported by the next synchronize), as CUDA does.
cudaError_t launch_error = cudaSuccess, kernel_error = cudaSuccess;
std::string last_fault;

std::string where() {
  char buf[256];
  const Block& b = current_block;
  if (!S.running) {
    std::snprintf(buf, sizeof buf, "%s block (%u,%u,%u)", S.kernel, b.idx.x, b.idx.y, b.idx.z);
  } else {
    const Thread& t = S.running->thread;
    std::snprintf(buf, sizeof buf, "%s block (%u,%u,%u) thread (%u,%u,%u) (warp %d lane %d)", S.kernel, b.idx.x, b.idx.y,
                  b.idx.z, t.idx.x, t.idx.y, t.idx.z, t.warp, t.lane);
  }
  return buf;
}

std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

void to_scheduler(Fiber* f) {
  if (!_setjmp(f->jb)) _longjmp(S.main_jb, 1);
}
void resume(Fiber* f) {
  if (_setjmp(S.main_jb)) return;
  if (f->fresh) {
    f->fresh = false;
    setcontext(&f->ctx);
  }
  _longjmp(f->jb, 1);
}

void fault_here(cudaError_t code, const std::string& message) {
  if (!S.faulted) {
    S.faulted = true;
    S.fault_code = code;
    S.fault_message = where() + ": " + message;
  }
  if (S.running) {
    Fiber* f = S.running;
    f->state = kDone;
    to_scheduler(f);  // never resumed: the launch is abandoned
  }
}

void event() { S.spins = 0; }

void make_ready(Fiber& f) {
  f.state = kRunnable;
  S.ready.push_back(&f);
}

// ---- the shared-memory race check. Kernels are compiled with -fsanitize=thread, whose instrumentation
// calls __tsan_read*/__tsan_write* (below) before every access; for an address inside a registered __shared__
// variable, the shadow of each byte keeps its writers and readers since the last barrier. A thread that reads a
// byte another warp wrote, or writes a byte another warp read, with no __syncthreads in between faults the
// launch. Warps that write one byte with no barrier in between must all store the same value (a flag set by
// whichever threads find something is no race: every order leaves the same value); that is checked at the
// byte's next access. Volatile accesses and atomics are the sanctioned ways to share a word and go unchecked;
// so do accesses within one warp (its lanes run one after another here).
uint32_t race_epoch = 1;         // block starts and barrier releases so far: "since the last barrier" is one epoch
uint32_t block_first_epoch = 1;  // race_epoch when the running block started
// One access as the race report names it: the thread, where it was (the caller's address) and the barrier it
// had passed last, all as they were when it accessed the byte.
struct Access {
  int32_t thread = -1;
  int32_t barrier_line = 0;
  const char* barrier_file = nullptr;
  const void* pc = nullptr;
};
struct Shadow {
  uint32_t w_epoch = 0, r_epoch = 0;
  Access writer, reader;
  Access other_reader;  // a reader of this epoch in another warp than reader's
  Access other_writer;  // a writer of w_epoch in another warp than writer's, when writers_in_warps
  bool writers_in_warps = false;
  unsigned char agreed = 0;  // the value the writers of w_epoch must all leave, when writers_in_warps
};
struct SharedVar {
  char* p;
  size_t n;
  const char *name, *file;
  int line;
  std::vector<Shadow> shadow;
};
std::vector<SharedVar> shared_vars;  // sorted by address
uintptr_t shared_lo = UINTPTR_MAX, shared_hi = 0;

void register_shared(char* p, size_t n, const char* name, const char* file, int line) {
  auto it = shared_vars.begin();
  while (it != shared_vars.end() && it->p < p) ++it;
  if (it != shared_vars.end() && it->p == p) return;
  shared_vars.insert(it, SharedVar{p, n, name, file, line, std::vector<Shadow>(n)});
  shared_lo = std::min(shared_lo, (uintptr_t)p);
  shared_hi = std::max(shared_hi, (uintptr_t)p + n);
}

// "lib.so+0x1234" for addr2line.
std::string code_address(const void* pc) {
  Dl_info info{};
  if (!pc || !dladdr(pc, &info) || !info.dli_fname) return "?";
  return format("%s+0x%zx", info.dli_fname, (size_t)((const char*)pc - (const char*)info.dli_fbase));
}

std::string describe(const Access& a, const char* verb) {
  return format("thread %d (warp %d, past the barrier at %s:%d) %s it at %s", a.thread, a.thread / kWarpSize,
                a.barrier_file ? a.barrier_file : "?", a.barrier_line, verb, code_address(a.pc).c_str());
}

void race(const SharedVar& v, size_t offset, const Access& first, const char* first_did, const Access& second,
          const char* second_did) {
  fault_here(cudaErrorLaunchFailure,
             format("shared-memory race on %s+%zu (%s:%d): %s, while %s, with no __syncthreads in between", v.name, offset,
                    v.file, v.line, describe(first, first_did).c_str(), describe(second, second_did).c_str()));
}

void shared_access(const void* addr, size_t size, bool write, const void* pc) {
  const uintptr_t a = (uintptr_t)addr;
  if (a >= shared_hi || a + size <= shared_lo || !S.running) return;
  auto it = std::upper_bound(shared_vars.begin(), shared_vars.end(), a,
                             [](uintptr_t x, const SharedVar& v) { return x < (uintptr_t)v.p; });
  if (it == shared_vars.begin()) return;
  SharedVar& v = *--it;
  if (a >= (uintptr_t)v.p + v.n) return;
  const Fiber& f = *S.running;
  const int w = f.thread.warp;
  const Access mine{f.thread.linear, f.barrier_line, f.barrier_file, pc};
  const auto warp_of = [](const Access& x) { return x.thread / kWarpSize; };
  const char* did = write ? "writes" : "reads";
  const size_t first = a - (uintptr_t)v.p, last = std::min(v.n, first + size);
  for (size_t i = first; i < last; ++i) {
    Shadow& sh = v.shadow[i];
    const bool written_now = sh.w_epoch == race_epoch;
    if (sh.writers_in_warps && sh.w_epoch >= block_first_epoch) {  // the last write of several warps' agreed?
      if ((unsigned char)v.p[i] != sh.agreed) race(v, i, sh.writer, "wrote", sh.other_writer, "wrote another value");
      if (!written_now) sh.writers_in_warps = false;
    }
    const bool own_write = warp_of(sh.writer) == w || (sh.writers_in_warps && warp_of(sh.other_writer) == w);
    if (!write && written_now && !own_write) race(v, i, mine, did, sh.writer, "wrote");
    if (write) {
      if (sh.r_epoch == race_epoch) {
        if (warp_of(sh.reader) != w) race(v, i, mine, did, sh.reader, "read");
        if (sh.other_reader.thread >= 0) race(v, i, mine, did, sh.other_reader, "read");
      }
      if (written_now && warp_of(sh.writer) != w) {
        if (!sh.writers_in_warps) sh.agreed = (unsigned char)v.p[i];
        sh.writers_in_warps = true;
        sh.other_writer = sh.writer;
      } else if (!written_now) {
        sh.writers_in_warps = false;
      }
      sh.w_epoch = race_epoch;
      sh.writer = mine;
    } else if (sh.r_epoch != race_epoch) {
      sh.r_epoch = race_epoch;
      sh.reader = mine;
      sh.other_reader = Access{};
    } else if (warp_of(sh.reader) != w && sh.other_reader.thread < 0) {
      sh.other_reader = mine;
    }
  }
}


void release_block_barrier() {
  if (S.at_barrier == 0 || S.at_barrier < S.alive) return;
  ++S.epoch;
  const bool reverse = S.epoch & 1;  // the order the threads leave the barrier in alternates
  for (size_t k = 0; k < S.nthreads; ++k) {
    Fiber& f = S.fibers[reverse ? S.nthreads - 1 - k : k];
    if (f.state != kWaitBlock) continue;
    f.barrier_result = S.barrier_count;
    make_ready(f);
  }
  S.at_barrier = S.barrier_count = 0;
  ++race_epoch;
  event();
}

const char* op_name(const Fiber& f) { return f.what; }

// Completes the exchange of `mask` in warp w once every live lane of it has arrived.
void try_complete(int w, unsigned mask) {
  Warp& warp = S.warps[w];
  const unsigned group = mask & warp.alive;
  if ((warp.arrived & group) != group || group == 0) return;
  Fiber* lanes = &S.fibers[(size_t)w * kWarpSize];
  unsigned ballot = 0;
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(group >> l & 1)) continue;
    const Fiber& f = lanes[l];
    if (f.mask != mask || f.op != lanes[__builtin_ctz(group)].op) {
      const Fiber& g = lanes[__builtin_ctz(group)];
      fault_here(cudaErrorIllegalInstruction,
                 format("warp %d: lane %d is in %s (mask 0x%08x, %s:%d) while lane %d is in %s (mask 0x%08x, %s:%d)", w,
                        __builtin_ctz(group), op_name(g), g.mask, g.file, g.line, l, op_name(f), f.mask, f.file, f.line));
      return;
    }
    ballot |= (unsigned)(f.pred != 0) << l;
  }
  for (int l = 0; l < kWarpSize; ++l) {
    if (!(group >> l & 1)) continue;
    Fiber& f = lanes[l];
    if (f.op == kShfl) {
      if (f.src < 0 || f.src >= kWarpSize || !(mask >> f.src & 1) || !(warp.alive >> f.src & 1)) {
        const bool outside = f.src < 0 || f.src >= kWarpSize || !(mask >> f.src & 1);
        fault_here(cudaErrorIllegalInstruction,
                   format("warp %d lane %d: %s (%s:%d) reads lane %d, %s (mask 0x%08x)", w, l, op_name(f), f.file, f.line,
                          f.src, outside ? "which the mask leaves out" : "which has exited or does not exist", mask));
        return;
      }
      std::memcpy(f.result.bytes, lanes[f.src].value, sizeof f.value);
    }
    f.result.ballot = ballot;
    f.result.participants = group;
    make_ready(f);
  }
  warp.arrived &= ~group;
  event();
}

void thread_exit(Fiber* f) {
  f->state = kDone;
  --S.alive;
  Warp& warp = S.warps[f->thread.warp];
  warp.alive &= ~(1u << f->thread.lane);
  event();
  // Lanes waiting for this one: their exchange now completes without it.
  Fiber* lanes = &S.fibers[(size_t)f->thread.warp * kWarpSize];
  for (int l = 0; l < kWarpSize && !S.faulted; ++l)
    if (warp.arrived >> l & 1) try_complete(f->thread.warp, lanes[l].mask);
  release_block_barrier();
}

void fiber_main() {
  for (;;) {
    S.running->parked = false;
    S.thunk(S.closure);
    Fiber* f = S.running;
    thread_exit(f);
    f->parked = true;
    to_scheduler(f);
  }
}

void allocate_fibers(size_t n) {
  while (S.fibers.size() < n) {
    S.fibers.emplace_back();
  }
  for (Fiber& f : S.fibers) {
    if (f.stack) continue;
    void* mem = mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) std::abort();
    mprotect(mem, 4096, PROT_NONE);  // a stack overflow faults instead of corrupting the neighbour
    f.stack = static_cast<char*>(mem) + 4096;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
  }
}

// "deadlock: no thread can proceed; 32 threads wait in __syncthreads (f:l); 16 lanes wait in __shfl_sync
// mask 0xffffffff (f:l), e.g. thread 0 (warp 0 lane 0)"
std::string describe_deadlock() {
  std::vector<std::pair<std::string, int>> groups;  // what they wait in, first thread
  std::vector<int> counts;
  for (size_t i = 0; i < S.nthreads; ++i) {
    const Fiber& f = S.fibers[i];
    if (f.state != kWaitBlock && f.state != kWaitWarp) continue;
    const std::string what = f.state == kWaitBlock
                                 ? format("__syncthreads (%s:%d)", S.barrier_file, S.barrier_line)
                                 : format("%s mask 0x%08x (%s:%d)", f.what, f.mask, f.file, f.line);
    size_t g = 0;
    while (g < groups.size() && groups[g].first != what) ++g;
    if (g == groups.size()) {
      groups.emplace_back(what, f.thread.linear);
      counts.push_back(0);
    }
    ++counts[g];
  }
  std::string s = "deadlock: no thread can proceed;";
  for (size_t g = 0; g < groups.size(); ++g)
    s += format(" %d thread(s) wait in %s, the first thread %d;", counts[g], groups[g].first.c_str(), groups[g].second);
  return s;
}

void run_block(size_t nthreads, dim3 block) {
  S.shared.clear();
  block_first_epoch = ++race_epoch;
  S.nthreads = nthreads;
  S.alive = (int)nthreads;
  S.at_barrier = S.barrier_count = 0;
  S.spins = 0;
  S.epoch = 0;
  const size_t nwarps = (nthreads + kWarpSize - 1) / kWarpSize;
  S.warps.assign(nwarps, Warp{});
  S.ready.clear();
  S.ready_head = 0;
  for (size_t i = 0; i < nthreads; ++i) {
    Fiber& f = S.fibers[i];
    make_ready(f);
    f.barrier_file = "the kernel's start";
    f.barrier_line = 0;
    if (!f.parked && !f.fresh) {  // abandoned inside a faulted launch: start it afresh
      f.ctx.uc_stack.ss_sp = f.stack;
      f.ctx.uc_stack.ss_size = kStackBytes;
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, fiber_main, 0);
      f.fresh = true;
    }
    f.thread.linear = (int)i;
    f.thread.idx = {unsigned(i % block.x), unsigned(i / block.x % block.y), unsigned(i / ((size_t)block.x * block.y))};
    f.thread.lane = int(i % kWarpSize);
    f.thread.warp = int(i / kWarpSize);
    S.warps[f.thread.warp].alive |= 1u << f.thread.lane;
  }
  while (S.alive > 0 && !S.faulted) {
    if (S.ready_head == S.ready.size()) {
      fault_here(cudaErrorLaunchFailure, describe_deadlock());
      break;
    }
    if (S.ready_head > 4096 && S.ready_head * 2 > S.ready.size()) {  // drop the consumed front now and then
      S.ready.erase(S.ready.begin(), S.ready.begin() + S.ready_head);
      S.ready_head = 0;
    }
    Fiber* f = S.ready[S.ready_head++];
    S.running = f;
    current_thread = &f->thread;
    resume(f);
    S.running = nullptr;
  }
  S.running = nullptr;
  current_thread = nullptr;
}

void set_error(cudaError_t& slot, cudaError_t code) {
  if (slot == cudaSuccess) slot = code;
}

}  // namespace

WarpResult warp_exchange(WarpOp op, unsigned mask, const void* value, int size, int src, int pred, const char* what,
                         const char* file, int line) {
  Fiber* f = S.running;
  if (!f) kernel_fault(cudaErrorIllegalInstruction, "warp intrinsic called outside a kernel");
  const int lane = f->thread.lane;
  if (!(mask >> lane & 1))
    fault_here(cudaErrorIllegalInstruction,
               format("%s (%s:%d) with mask 0x%08x, which leaves out the calling lane %d", what, file, line, mask, lane));
  f->op = op;
  f->mask = mask;
  if (size) std::memcpy(f->value, value, size);
  f->src = src;
  f->pred = pred;
  f->what = what;
  f->file = file;
  f->line = line;
  f->state = kWaitWarp;
  S.warps[f->thread.warp].arrived |= 1u << lane;
  try_complete(f->thread.warp, mask);
  to_scheduler(f);  // waiting, or queued behind the lanes it released
  return f->result;
}

int block_barrier(int pred, const char* file, int line) {
  Fiber* f = S.running;
  if (!f) kernel_fault(cudaErrorIllegalInstruction, "__syncthreads called outside a kernel");
  // Every thread of the block must reach the same __syncthreads (a GPU would pair up different ones).
  if (S.at_barrier > 0 && (S.barrier_line != line || std::strcmp(S.barrier_file, file) != 0))
    fault_here(cudaErrorIllegalInstruction,
               format("divergent __syncthreads: this thread (past the barrier at %s:%d) waits at %s:%d while thread %d "
                      "waits at %s:%d",
                      f->barrier_file, f->barrier_line, file, line, S.barrier_thread, S.barrier_file, S.barrier_line));
  f->state = kWaitBlock;
  f->barrier_file = file;
  f->barrier_line = line;
  if (S.at_barrier == 0) {
    S.barrier_file = file;
    S.barrier_line = line;
    S.barrier_thread = f->thread.linear;
  }
  ++S.at_barrier;
  S.barrier_count += pred != 0;
  release_block_barrier();
  to_scheduler(f);  // waiting, or queued with the threads it released
  return f->barrier_result;
}

void shared_var(void* p, size_t bytes, const char* name, const char* file, int line) {
  char* c = static_cast<char*>(p);
  for (char* v : S.shared)
    if (v == c) return;
  S.shared.push_back(c);
  std::memset(p, 0xff, bytes);
  register_shared(c, bytes, name, file, line);
}

void spin_yield() {
  Fiber* f = S.running;
  if (!f) return;
  if (++S.spins > kSpinLimit) fault_here(cudaErrorLaunchFailure, "a spin-wait never ends (no other thread makes progress)");
  S.ready.push_back(f);
  to_scheduler(f);
}

void kernel_fault(cudaError_t code, const char* message) {
  if (!S.running) {
    std::fprintf(stderr, "pe_emu: %s\n", message);
    std::abort();
  }
  fault_here(code, message);
  std::abort();  // unreachable: the fiber is never resumed
}

cudaError_t launch(const char* name, dim3 grid, dim3 block, size_t, Thunk thunk, void* closure) {
  std::lock_guard<std::mutex> lock(launch_mutex);
  const size_t nthreads = (size_t)block.x * block.y * block.z;
  if (nthreads == 0 || nthreads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
    last_fault = format("%s: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)", name, grid.x, grid.y,
                        grid.z, block.x, block.y, block.z);
    std::fprintf(stderr, "pe_emu: %s\n", last_fault.c_str());
    set_error(launch_error, cudaErrorInvalidConfiguration);
    return cudaErrorInvalidConfiguration;
  }
  if (S.running) kernel_fault(cudaErrorIllegalInstruction, "a launch from device code");
  // After a fault, later launches do not run until a synchronize has reported it (a GPU's context refuses them
  // too): they would read what the abandoned launch left half written.
  if (kernel_error != cudaSuccess) return kernel_error;
  allocate_fibers(nthreads);
  S.kernel = name;
  S.thunk = thunk;
  S.closure = closure;
  S.faulted = false;
  current_block.dim = block;
  current_block.grid = grid;
  for (unsigned z = 0; z < grid.z && !S.faulted; ++z)
    for (unsigned y = 0; y < grid.y && !S.faulted; ++y)
      for (unsigned x = 0; x < grid.x && !S.faulted; ++x) {
        current_block.idx = {x, y, z};
        run_block(nthreads, block);
      }
  if (!S.faulted) return cudaSuccess;
  last_fault = S.fault_message;
  std::fprintf(stderr, "pe_emu: %s\n", last_fault.c_str());
  set_error(kernel_error, S.fault_code);
  return S.fault_code;
}

}  // namespace pe_emu

// ---- the shared-memory bounds checks (-fsanitize=bounds): an index out of a fixed-size array faults the launch
namespace {
struct SourceLocation {
  const char* file;
  uint32_t line, column;
};
struct TypeDescriptor {
  uint16_t kind, info;
  char name[1];
};
struct OutOfBoundsData {
  SourceLocation loc;
  const TypeDescriptor* array_type;
  const TypeDescriptor* index_type;
};
[[noreturn]] void out_of_bounds(OutOfBoundsData* data, uintptr_t index) {
  const bool is_signed = data->index_type->info & 1;
  const std::string msg = pe_emu::format("index %lld out of bounds for type %s (%s:%u)",
                                         is_signed ? (long long)(intptr_t)index : (long long)index,
                                         data->array_type->name, data->loc.file, data->loc.line);
  pe_emu::kernel_fault(cudaErrorIllegalAddress, msg.c_str());
}
}  // namespace
extern "C" {
void __ubsan_handle_out_of_bounds(OutOfBoundsData* data, uintptr_t index) { out_of_bounds(data, index); }
void __ubsan_handle_out_of_bounds_abort(OutOfBoundsData* data, uintptr_t index) { out_of_bounds(data, index); }
const char* pe_emu_last_fault() { return pe_emu::last_fault.c_str(); }

// The -fsanitize=thread instrumentation of the kernels, answered by the shared-memory race check.
#define PE_EMU_TSAN_SIZE(N)                                                                             \
  void __tsan_read##N(void* p) { pe_emu::shared_access(p, N, false, __builtin_return_address(0)); }                                 \
  void __tsan_write##N(void* p) { pe_emu::shared_access(p, N, true, __builtin_return_address(0)); }                                 \
  void __tsan_unaligned_read##N(void* p) { pe_emu::shared_access(p, N, false, __builtin_return_address(0)); }                       \
  void __tsan_unaligned_write##N(void* p) { pe_emu::shared_access(p, N, true, __builtin_return_address(0)); }                       \
  void __tsan_volatile_read##N(void*) {}                                                               \
  void __tsan_volatile_write##N(void*) {}                                                              \
  void __tsan_unaligned_volatile_read##N(void*) {}                                                     \
  void __tsan_unaligned_volatile_write##N(void*) {}
PE_EMU_TSAN_SIZE(1)
PE_EMU_TSAN_SIZE(2)
PE_EMU_TSAN_SIZE(4)
PE_EMU_TSAN_SIZE(8)
PE_EMU_TSAN_SIZE(16)
#undef PE_EMU_TSAN_SIZE
void __tsan_read_range(void* p, size_t n) { pe_emu::shared_access(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, size_t n) { pe_emu::shared_access(p, n, true, __builtin_return_address(0)); }
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
// Host code's atomics (a launcher's cache, a function static's guard): sequentially consistent, whatever
// order was asked.
#define PE_EMU_TSAN_ATOMIC(N, T)                                                                             \
  T __tsan_atomic##N##_load(const volatile T* p, int) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }      \
  void __tsan_atomic##N##_store(volatile T* p, T v, int) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
PE_EMU_TSAN_ATOMIC(8, int8_t)
PE_EMU_TSAN_ATOMIC(16, int16_t)
PE_EMU_TSAN_ATOMIC(32, int32_t)
PE_EMU_TSAN_ATOMIC(64, int64_t)
#undef PE_EMU_TSAN_ATOMIC
}

// ---- host API: device memory is host memory, streams run at once
namespace {
std::chrono::steady_clock::time_point event_times[64];
int events_made = 0;
}  // namespace

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (bytes) std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) { return cudaMemset(dst, value, bytes); }
cudaError_t cudaDeviceSynchronize() {
  const cudaError_t e = pe_emu::kernel_error != cudaSuccess ? pe_emu::kernel_error : pe_emu::launch_error;
  pe_emu::kernel_error = pe_emu::launch_error = cudaSuccess;
  return e;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }
cudaError_t cudaGetLastError() {
  const cudaError_t e = pe_emu::launch_error;
  pe_emu::launch_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return pe_emu::launch_error; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = pe_emu::kMultiProcessors; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  if (events_made == 64) return cudaErrorMemoryAllocation;
  *e = reinterpret_cast<cudaEvent_t>(&event_times[events_made++]);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  *reinterpret_cast<std::chrono::steady_clock::time_point*>(e) = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  const auto a = *reinterpret_cast<std::chrono::steady_clock::time_point*>(start);
  const auto b = *reinterpret_cast<std::chrono::steady_clock::time_point*>(stop);
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return cudaSuccess;
}
