package scale

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/test/noopdriver"
)

// Machine describes the host: CPU model, cores, memory, kernel.
func Machine() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := "unknown memory"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			var kb int64
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				mem = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
				break
			}
		}
	}
	kernel := "unknown kernel"
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(data))
	}
	return fmt.Sprintf("%s, %d cores, %s, %s", model, runtime.NumCPU(), mem, kernel)
}

func ms(seconds float64) string {
	if math.IsNaN(seconds) {
		return "–"
	}
	return fmt.Sprintf("%.1f ms", seconds*1000)
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// WriteReport writes the results as markdown tables.
func WriteReport(w io.Writer, machine string, results []Result, failures []string) {
	fmt.Fprintf(w, "Machine: %s.\n\n", machine)
	fmt.Fprintf(w, "Scheduling (kube-scheduler's own p50/p99 of `scheduler_scheduling_attempt_duration_seconds{result=\"scheduled\"}`, from buckets that double; pods/s from the first binding to the last as a watch sees them; the ratio is against the no-op driver (%s) at the same scale):\n\n", noopdriver.DriverName)
	fmt.Fprintln(w, "| nodes | pods | pods' claim | pods/s | attempt p50 | attempt p99 | unschedulable / error attempts | nodes used (most pods on one) | scheduler CPU (peak RSS) | pods/s vs no-op |")
	fmt.Fprintln(w, "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		var noop float64
		for _, m := range r.Modes {
			if m.Mode.Driver == noopdriver.DriverName {
				noop = m.Throughput
			}
		}
		for _, m := range r.Modes {
			ratio := "–"
			if noop > 0 && m.Mode.Driver != noopdriver.DriverName {
				ratio = fmt.Sprintf("%.0f %%", 100*m.Throughput/noop)
			}
			fmt.Fprintf(w, "| %d | %d | %s | %.1f | %s | %s | %.0f / %.0f | %d (%d) | %s (%s) | %s |\n", r.Config.Nodes, m.Pods, m.Mode.Name, m.Throughput,
				ms(m.AttemptP50), ms(m.AttemptP99), m.Attempts["unschedulable"], m.Attempts["error"], m.NodesUsed, m.MostOnANode,
				dur(m.SchedulerCPU), mib(m.SchedulerPeakRSS), ratio)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The controller (a separate dra-swap-controller process, chart defaults: 50 QPS, burst 100, 4 workers, swap-claims selection), while each mode's pods were scheduled, marked Running and labeled: CPU time and API requests from its /proc and `rest_client_requests_total`, RSS at the end (peak so far); binding → labels as the watch sees them (0 when the labels came with or before the binding); webhook reviews answered 429, and pods the webhooks left to the reconciler because the cache did not show what a review named within 2 s, or for the relabel budget:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | pods' claim | labeled (at binding) | binding → labels p50 / p99 | CPU | RSS (peak) | API requests per pod | 429 / not cached / relabel |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		for _, m := range r.Modes {
			labeled := "–"
			delays := "–"
			if m.Mode.Driver == v1alpha1.DriverName {
				labeled = fmt.Sprintf("%d (%d)", m.Labeled, m.LabeledAtBind)
				delays = dur(m.LabelP50) + " / " + dur(m.LabelP99)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s (%s) | %.2f | %.0f / %.0f / %.0f |\n", r.Config.Nodes, m.Mode.Name, labeled, delays,
				dur(m.ControllerCPU), mib(m.ControllerRSS), mib(m.PeakRSS), m.ControllerRequests/float64(max(m.Pods, 1)), m.Busy, m.DeferredNotCached, m.DeferredRelabel)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Slices and messages: the objects a node adds (its Node with the controller's labels, its dra.swap ResourceSlice; the no-op slice exists only in this harness) as etcd stores them (protobuf); a pending pod that fits only once a node's offer grows: that node's slice update → the pod's binding; the largest event note (the events API allows 1024 bytes) and the pending pod's PodScheduled message; writes the scheduler's or the controller's log says were refused:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | Node | dra.swap slice | no-op slice | swap change → bound | largest event note | PodScheduled message | refused writes |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %d | %d B | %d B | %d B | %s | %d B (%s) | %d B | %d |\n", r.Config.Nodes, r.NodeBytes, r.SwapSliceBytes, r.NoopSliceBytes,
			dur(r.SwapChange), r.MaxEventNote, r.MaxEventReason, r.MaxConditionMessage, r.RefusedWrites)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%d nodes: cluster and slices set up in %s, the whole run took %s.\n", r.Config.Nodes, dur(r.Setup), dur(r.Total))
	}
	for _, f := range failures {
		fmt.Fprintf(w, "\nStopped: %s\n", f)
	}
}
