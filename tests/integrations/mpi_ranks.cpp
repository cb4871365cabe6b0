// An MPI program on simulated devices (each rank its own sim:0), run by run_mpi_ranks.py under
// mpirun -np 4. Rank R keeps R+1 blocks of 16 MiB from one site; rank 3 also keeps a 64 MiB
// buffer from another site. Exact per-rank numbers follow (16 MiB blocks are their own segments).
//   mpi_ranks dump DIR [cuda]   gather_memory_stats, the budget helpers, dump_snapshots; rank 0
//                        reads every rank file and ranks.json back and checks them. With "cuda"
//                        rank R runs on cuda:R instead (bench/gpu_ranks.sh, any -np up to the GPUs)
//   mpi_ranks oom DIR    rank 2 runs out of memory while the others wait in a barrier; its OOM
//                        dump is written without a collective, then it aborts the job
// Exit 0 when every check passes; failures print one line each.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gpumemprof/codec/json_reader.hpp>
#include <gpumemprof/export/formats/snapshot_reader.hpp>
#include <gpumemprof/gpumemprof.hpp>
#include <gpumemprof/integrations/mpi.hpp>

namespace gmp = gpumemprof;
using namespace gmp::literals;

namespace {

int failures = 0;
int my_rank = -1;
std::string device = "sim:0";  // or cuda:<rank>

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("rank %d FAILED: %s\n", my_rank, what.c_str());
  std::fflush(stdout);
}

std::int64_t expected_peak(int rank) {
  return static_cast<std::int64_t>((rank + 1) * 16_MiB + (rank == 3 ? 64_MiB : 0));
}

// Two allocation sites, so that the cross-rank report has a site that differs.
__attribute__((noinline)) void* layer_weights(gmp::DeviceAllocator& a) { return a.allocate(16_MiB); }
__attribute__((noinline)) void* extra_buffer(gmp::DeviceAllocator& a) {
  void* p = a.allocate(64_MiB);
  asm volatile("" : : "r"(p) : "memory");  // no tail call: a release build keeps this frame on the stack
  return p;
}

std::vector<void*> rank_work(int rank) {
  auto& alloc = gmp::default_allocator(device);
  void* scratch = alloc.allocate(1_MiB);  // freed first: in the trace and reserved, below the peak
  alloc.deallocate(scratch);
  std::vector<void*> kept;
  for (int i = 0; i <= rank; ++i) kept.push_back(layer_weights(alloc));
  if (rank == 3) kept.push_back(extra_buffer(alloc));
  return kept;
}

void check_rank_file(const std::string& dir, int r, int world) {
  const std::string path = dir + "/rank-" + std::to_string(r) + ".pickle";
  const gmp::Snapshot snap = gmp::load_snapshot(path);
  const gmp::RankInfo& info = snap.rank_info;
  check(info.rank == r, path + ": rank " + std::to_string(info.rank));
  check(info.world_size == world, path + ": world_size " + std::to_string(info.world_size));
  check(info.device == (device == "sim:0" ? device : "cuda:" + std::to_string(r)), path + ": device " + info.device);
  check(!info.host.empty(), path + ": no host");
  check(info.peak_allocated_bytes == expected_peak(r),
        path + ": peak_allocated_bytes " + std::to_string(info.peak_allocated_bytes));
  check(info.peak_reserved_bytes == expected_peak(r) + static_cast<std::int64_t>(2_MiB),
        path + ": peak_reserved_bytes " + std::to_string(info.peak_reserved_bytes));
  check(info.num_ooms == 0, path + ": num_ooms");
  std::uint64_t allocated = 0;
  for (const gmp::SnapshotSegment& s : snap.segments) allocated += s.allocated_size;
  check(allocated == static_cast<std::uint64_t>(expected_peak(r)), path + ": live bytes " + std::to_string(allocated));
  // One trace list per device up to this rank's (PyTorch's layout): sim:0 is list 0, cuda:R list R.
  const std::size_t own = device == "sim:0" ? 0 : static_cast<std::size_t>(r);
  check(snap.device_traces.size() == own + 1 && !snap.device_traces[own].empty(), path + ": no trace");
}

void check_index(const std::string& dir, int world) {
  const gmp::DataValue root = gmp::parse_json(gmp::read_file(dir + "/ranks.json"));
  check(root.find("world_size") != nullptr && root.find("world_size")->as_int() == world, "ranks.json: world_size");
  const gmp::DataValue* ranks = root.find("ranks");
  check(ranks != nullptr && ranks->size() == static_cast<std::size_t>(world), "ranks.json: one entry per rank");
  if (ranks == nullptr) return;
  for (int r = 0; r < world && static_cast<std::size_t>(r) < ranks->size(); ++r) {
    const gmp::DataValue& e = ranks->items()[static_cast<std::size_t>(r)];
    const std::string where = "ranks.json rank " + std::to_string(r) + ": ";
    check(e.find("rank")->as_int() == r, where + "rank");
    check(e.find("peak_allocated_bytes")->as_int() == expected_peak(r), where + "peak_allocated_bytes");
    check(e.find("peak_reserved_bytes")->as_int() == expected_peak(r) + static_cast<std::int64_t>(2_MiB),
          where + "peak_reserved_bytes");
    check(e.find("file")->as_string() == "rank-" + std::to_string(r) + ".pickle", where + "file");
    check(e.find("device")->as_string() == (device == "sim:0" ? device : "cuda:" + std::to_string(r)),
          where + "device");
    check(!e.find("host")->as_string().empty(), where + "host");
  }
}

int run_dump(const std::string& dir, int rank, int world) {
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all}, device);
  const std::vector<void*> kept = rank_work(rank);
  const std::vector<gmp::MemoryStats> all = gmp::mpi::gather_memory_stats(device);
  if (rank == 0) {
    check(all.size() == static_cast<std::size_t>(world), "gather: one entry per rank");
    for (int r = 0; r < world && static_cast<std::size_t>(r) < all.size(); ++r) {
      const gmp::MemoryStats& s = all[static_cast<std::size_t>(r)];
      check(s.allocated_bytes.all().peak == expected_peak(r),
            "gather: rank " + std::to_string(r) + " peak allocated " + std::to_string(s.allocated_bytes.all().peak));
      check(s.allocated_bytes.all().current == expected_peak(r), "gather: rank " + std::to_string(r) + " current");
      check(s.allocation.all().current == r + 1 + (r == 3 ? 1 : 0),
            "gather: rank " + std::to_string(r) + " allocations");
    }
    const int last = world - 1;
    check(gmp::largest_peak(all) == gmp::RankPeak{last, expected_peak(last)}, "largest_peak is the last rank");
    check(gmp::smallest_peak(all) == gmp::RankPeak{0, expected_peak(0)}, "smallest_peak is rank 0");
    check(world != 4 || gmp::peak_imbalance(all) == 8.0,
          "imbalance (128 MiB / 16 MiB) = 8, got " + std::to_string(gmp::peak_imbalance(all)));
    check(gmp::largest_peak(all, gmp::PeakOf::reserved).bytes == expected_peak(last) + static_cast<std::int64_t>(2_MiB),
          "largest reserved peak");
  } else {
    check(all.empty(), "gather: empty on ranks other than 0");
  }
  gmp::mpi::dump_snapshots(dir, device);
  if (rank == 0) {
    for (int r = 0; r < world; ++r) check_rank_file(dir, r, world);
    check_index(dir, world);
  }
  auto& alloc = gmp::default_allocator(device);
  for (void* p : kept) alloc.deallocate(p);
  alloc.validate();
  return 0;
}

int run_oom(const std::string& dir, int rank) {
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all}, "sim:0");
  const auto reporter = gmp::mpi::dump_on_oom(dir, "sim:0");
  const std::vector<void*> kept = rank_work(rank);
  if (rank == 2) {
    try {
      (void)gmp::default_allocator("sim:0").allocate(4_GiB);  // capacity: 1 GiB (set by the driver)
      check(false, "a 4 GiB request on a 1 GiB device succeeded");
    } catch (const gmp::OutOfMemoryError&) {
      check(reporter->count() == 1, "one OOM report");
      std::printf("rank 2: out of memory, dump written; aborting the job\n");
      std::fflush(stdout);
      MPI_Abort(MPI_COMM_WORLD, failures == 0 ? 3 : 1);  // as a training script would die
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the others wait here until the job is aborted
  check(false, "the barrier returned although rank 2 never reached it");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const bool on_cuda = argc == 4 && std::string(argv[1]) == "dump" && std::string(argv[3]) == "cuda";
  if ((argc != 3 && !on_cuda) || (std::string(argv[1]) != "dump" && std::string(argv[1]) != "oom")) {
    if (my_rank == 0) std::fprintf(stderr, "usage: mpi_ranks dump DIR [cuda] | oom DIR\n");
    MPI_Finalize();
    return 2;
  }
  try {
    if (on_cuda) device = "cuda:" + std::to_string(my_rank);
    if (std::string(argv[1]) == "dump") {
      if (world != 4 && !on_cuda) check(false, "run with -np 4, got " + std::to_string(world));
      run_dump(argv[2], my_rank, world);
    } else {
      run_oom(argv[2], my_rank);
    }
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  int any = failures;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (my_rank == 0 && any == 0) std::printf("all MPI checks passed\n");
  if (my_rank == 0 && any != 0) std::printf("%d MPI check(s) failed\n", any);
  return any == 0 ? 0 : 1;
}
