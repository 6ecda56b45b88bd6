package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// hotCold is the workload's hot/cold mode (HOT_MIB set): it maps HOT_MIB
// and COLD_MIB MiB of anonymous memory, writes every page of both once,
// then for DURATION_SECONDS (0: until killed) reads and writes a cache
// line of a pseudo-random hot page in a loop, counting those operations,
// and never touches the cold pages again. Every REPORT_SECONDS it prints a
// HOTCOLD line (JSON): the operations per second since the last line and
// its cgroup's memory figures. Each page holds 1 KiB of pseudo-random
// bytes and zeros, so a compressing swap (zswap, zram) stores it in about
// a quarter of a page, as typical heaps compress. With OPS_PER_SECOND it
// does at most that many operations a second and sleeps the rest: a
// server that keeps its hot set warm without taking a whole CPU (the
// density benchmark runs dozens of copies on one node).
func hotCold() {
	hot, cold := envInt("HOT_MIB", 64), envInt("COLD_MIB", 64)
	duration := time.Duration(envInt("DURATION_SECONDS", 0)) * time.Second
	rate := envInt("OPS_PER_SECOND", 0)
	every := time.Duration(max(envInt("REPORT_SECONDS", 5), 1)) * time.Second
	const page = 4096
	mem, err := unix.Mmap(-1, 0, (hot+cold)<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println("ERROR mmap:", err)
		os.Exit(1)
	}
	seed := uint64(0x9e3779b97f4a7c15)
	for off := 0; off < len(mem); off += page {
		for i := 0; i < 1024; i += 8 {
			seed = xorshift(seed)
			for b := range 8 {
				mem[off+i+b] = byte(seed >> (8 * b))
			}
		}
	}
	hotPages := uint64(hot << 20 / page)
	start := time.Now()
	last, lastOps := start, uint64(0)
	emitHotCold(hotColdLine{Phase: "touched", HotMiB: hot, ColdMiB: cold, Kernel: file("/proc/sys/kernel/osrelease"),
		Zswap: file("/sys/module/zswap/parameters/enabled"), Compressor: file("/sys/module/zswap/parameters/compressor")})
	var ops uint64
	for duration == 0 || time.Since(start) < duration {
		// A batch of operations between clock reads.
		for range 4096 {
			seed = xorshift(seed)
			off := int(seed%hotPages)*page + int(seed>>40)%(page/64)*64
			mem[off]++
			mem[off+63] ^= mem[off]
		}
		ops += 4096
		if rate > 0 {
			// Ahead of the rate: sleep until the operations done are due.
			if ahead := time.Duration(float64(ops)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		if now := time.Now(); now.Sub(last) >= every {
			emitHotCold(hotColdLine{Phase: "running", HotMiB: hot, ColdMiB: cold, Seconds: now.Sub(start).Seconds(),
				OpsPerSecond: float64(ops-lastOps) / now.Sub(last).Seconds(), Ops: ops})
			last, lastOps = now, ops
		}
	}
	emitHotCold(hotColdLine{Phase: "done", HotMiB: hot, ColdMiB: cold, Seconds: time.Since(start).Seconds(),
		OpsPerSecond: float64(ops) / time.Since(start).Seconds(), Ops: ops})
}

func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// hotColdLine is one HOTCOLD line: what the workload did and what its
// cgroup (v2) holds.
type hotColdLine struct {
	Phase          string  `json:"phase"`
	HotMiB         int     `json:"hotMiB"`
	ColdMiB        int     `json:"coldMiB"`
	Seconds        float64 `json:"seconds"`
	Ops            uint64  `json:"ops"`
	OpsPerSecond   float64 `json:"opsPerSecond"`
	MemoryCurrent  int64   `json:"memoryCurrent"`
	Anon           int64   `json:"anon"`
	File           int64   `json:"file"`
	SwapCurrent    int64   `json:"swapCurrent"`
	ZswapBytes     int64   `json:"zswap"`
	Zswapped       int64   `json:"zswapped"`
	StallSomeTotal int64   `json:"stallSomeTotalMicros"`
	// Kernel, Zswap (Y or N) and Compressor describe the node, on the
	// first line only.
	Kernel     string `json:"kernel,omitempty"`
	Zswap      string `json:"zswapEnabled,omitempty"`
	Compressor string `json:"zswapCompressor,omitempty"`
}

func emitHotCold(l hotColdLine) {
	const dir = "/sys/fs/cgroup/"
	l.MemoryCurrent = num(file(dir + "memory.current"))
	l.SwapCurrent = num(file(dir + "memory.swap.current"))
	if f, err := os.Open(dir + "memory.stat"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			k, v, _ := strings.Cut(s.Text(), " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "anon":
				l.Anon = n
			case "file":
				l.File = n
			case "zswap":
				l.ZswapBytes = n
			case "zswapped":
				l.Zswapped = n
			}
		}
		f.Close()
	}
	for line := range strings.Lines(file(dir + "memory.pressure")) {
		if rest, ok := strings.CutPrefix(line, "some "); ok {
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "total="); ok {
					l.StallSomeTotal, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	data, _ := json.Marshal(l)
	fmt.Printf("HOTCOLD %s\n", data)
}
