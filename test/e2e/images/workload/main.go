// Command workload is the e2e test image: it reports its cgroup's memory and
// swap limits, allocates and touches ALLOC_MIB MiB, reports the swap it used,
// touches every page again and again for THRASH_SECONDS (which, beyond its
// memory limit, keeps it swapping: memory pressure), holds for HOLD_SECONDS
// and exits 0. An OOM kill shows as exit 137.
//
// With MMAP=1 it instead maps ALLOC_MIB MiB, touches every page once,
// reports MAPPED and holds for HOLD_SECONDS, unmapping them on SIGUSR1
// (then reports FREED): memory that stays where the kernel puts it (in
// swap, once reclaim pushed it there) and that a test can have freed. With FLOOD_TARGETS it
// floods webhook servers with forged admission reviews instead (flood.go).
// With HOT_MIB it runs a heap half hot, half cold instead, counting its
// operations (hotcold.go).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/images/workload/report"
)

func main() {
	if os.Getenv("FLOOD_TARGETS") != "" {
		flood()
		return
	}
	if os.Getenv("HOT_MIB") != "" {
		hotCold()
		return
	}
	alloc := envInt("ALLOC_MIB", 200)
	hold := envInt("HOLD_SECONDS", 0)
	thrash := envInt("THRASH_SECONDS", 0)
	r := read()
	emit("START", r)
	if os.Getenv("MMAP") == "1" {
		mapped(alloc, time.Duration(hold)*time.Second)
		return
	}

	chunks := make([][]byte, 0, alloc)
	for i := range alloc {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(i + j | 1) // non-zero, so pages are not shared zero pages
		}
		chunks = append(chunks, b)
	}
	end := read()
	end.AllocatedMiB = len(chunks)
	emit("RESULT", end)
	for deadline := time.Now().Add(time.Duration(thrash) * time.Second); time.Now().Before(deadline); {
		for i := range chunks {
			for j := 0; j < len(chunks[i]); j += 4096 {
				chunks[i][j]++
			}
		}
	}
	time.Sleep(time.Duration(hold) * time.Second)
	// Keep the allocation alive until the end.
	if len(chunks) > 0 && chunks[0][0] == 0 {
		fmt.Println("impossible")
	}
}

func envInt(name string, def int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return def
	}
	return v
}

func emit(kind string, r report.Report) {
	data, err := json.Marshal(r)
	if err != nil {
		fmt.Printf("%s {}\n", kind)
		return
	}
	fmt.Printf("%s %s\n", kind, data)
}

// read reports the container's cgroup (its own root in the cgroup namespace).
func read() report.Report {
	r := report.Report{EnvSwapLimit: os.Getenv("DRA_SWAP_LIMIT_BYTES"), Files: map[string]string{}}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "DOWNWARD_") {
			if r.Downward == nil {
				r.Downward = map[string]string{}
			}
			r.Downward[k] = v
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		r.CgroupVersion = 2
		dir := "/sys/fs/cgroup/"
		for _, f := range []string{"memory.max", "memory.swap.max", "memory.swap.current", "memory.swap.peak", "memory.swap.high", "memory.zswap.max", "memory.zswap.writeback", "memory.current"} {
			r.Files[f] = file(dir + f)
		}
		r.MemoryLimitBytes = num(r.Files["memory.max"])
		r.SwapLimitBytes = num(r.Files["memory.swap.max"])
		r.SwapUsageBytes = max(num(r.Files["memory.swap.current"]), num(r.Files["memory.swap.peak"]))
		r.MemoryUsageBytes = num(r.Files["memory.current"])
		return r
	}
	r.CgroupVersion = 1
	dir := "/sys/fs/cgroup/memory/"
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.usage_in_bytes", "memory.memsw.usage_in_bytes",
		"memory.max_usage_in_bytes", "memory.memsw.max_usage_in_bytes", "memory.swappiness"} {
		r.Files[f] = file(dir + f)
	}
	r.MemoryLimitBytes = num(r.Files["memory.limit_in_bytes"])
	r.SwapLimitBytes = num(r.Files["memory.memsw.limit_in_bytes"]) - r.MemoryLimitBytes
	// Swap in use now, or at the peak: memory+swap minus memory.
	now := num(r.Files["memory.memsw.usage_in_bytes"]) - num(r.Files["memory.usage_in_bytes"])
	peak := num(r.Files["memory.memsw.max_usage_in_bytes"]) - num(r.Files["memory.max_usage_in_bytes"])
	r.SwapUsageBytes = max(now, peak, 0)
	r.MemoryUsageBytes = num(r.Files["memory.usage_in_bytes"])
	return r
}

func file(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func num(s string) int64 {
	if s == "max" {
		return -1
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// mapped maps mib MiB, touches them and unmaps them on SIGUSR1, within
// hold.
func mapped(mib int, hold time.Duration) {
	freeing := make(chan os.Signal, 1)
	signal.Notify(freeing, unix.SIGUSR1)
	mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("ERROR mmap:", err)
		os.Exit(1)
	}
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = byte(i>>12) | 1
	}
	emit("MAPPED", read())
	select {
	case <-freeing:
		if err := unix.Munmap(mem); err != nil {
			fmt.Println("ERROR munmap:", err)
			os.Exit(1)
		}
		emit("FREED", read())
		time.Sleep(hold)
	case <-time.After(hold):
	}
}
