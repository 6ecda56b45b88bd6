package discovery

import (
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

func FuzzReadSwapBehavior(f *testing.F) {
	for _, seed := range []struct{ main, dropIn string }{
		{kubeletConfig("NoSwap"), kubeletConfig("LimitedSwap")},
		{kubeletConfig("LimitedSwap"), kubeletConfigHeader + "maxPods: 50\n"},
		{kubeletConfig("LimitedSwap"), kubeletConfig("NoSwap")},
		{kubeletConfig(`""`), ""},
		{kubeletConfigHeader + "failSwapOn: false\ncgroupDriver: systemd\n", kubeletConfig("limitedswap")},
		{`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","memorySwap":{"swapBehavior":"LimitedSwap"}}`, `{"memorySwap":{"swapBehavior":"NoSwap"}}`},
		{`{"memorySwap":{"swapBehavior":null}}`, `{"memorySwap":null}`},
		{"", ""},
		{kubeletConfig("UnlimitedSwap"), kubeletConfig("NoSwap")},
		{kubeletConfigHeader + "memorySwap: LimitedSwap\n", "memorySwap: {"},
		{kubeletConfigHeader + "memorySwap: [\n  swapBehavior: NoSwap\n", "\x00\xff"},
		{"memorySwap:\n  swapBehavior: &a LimitedSwap\nx: *a\n", "memorySwap: {swapBehavior: 1}"},
	} {
		f.Add([]byte(seed.main), []byte(seed.dropIn))
	}
	const (
		mainPath = "/var/lib/kubelet/config.yaml"
		dropDir  = "/etc/kubernetes/kubelet.conf.d"
		dropPath = dropDir + "/10-swap.conf"
	)
	f.Fuzz(func(t *testing.T, mainConfig, dropIn []byte) {
		h := newHostTree(t)
		h.write(mainPath, string(mainConfig))
		h.write(dropPath, string(dropIn))
		h.write(dropDir+"/README.txt", "not YAML: [") // ignored: not .conf

		alone, errAlone := ReadSwapBehavior(h.root, mainPath, "")
		checkBehavior(t, "main file", alone, errAlone)
		dropAlone, errDropAlone := ReadSwapBehavior(h.root, dropPath, "")
		checkBehavior(t, "drop-in as the main file", dropAlone, errDropAlone)
		got, err := ReadSwapBehavior(h.root, mainPath, dropDir)
		checkBehavior(t, "main file and drop-in", got, err)

		// The drop-in applies over the main file: a drop-in that is wrong
		// on its own (does not parse, or an unknown value) fails the
		// whole; if both are right on their own, the result is one of
		// theirs, and LimitedSwap in the drop-in always wins.
		if errDropAlone != nil {
			if err == nil {
				t.Fatalf("drop-in %q fails alone (%v), but main %q with it gives %q", dropIn, errDropAlone, mainConfig, got)
			}
			return
		}
		if errAlone != nil {
			return // an unknown value in the main file may be overridden
		}
		if err != nil {
			t.Fatalf("main %q (%s) and drop-in %q (%s) are fine alone, together: %v", mainConfig, alone, dropIn, dropAlone, err)
		}
		if got != alone && got != dropAlone {
			t.Fatalf("main %q (%s) with drop-in %q (%s) gives %s", mainConfig, alone, dropIn, dropAlone, got)
		}
		if dropAlone == v1alpha1.SwapBehaviorLimitedSwap && got != v1alpha1.SwapBehaviorLimitedSwap {
			t.Fatalf("drop-in %q sets LimitedSwap, but main %q with it gives %s", dropIn, mainConfig, got)
		}
	})
}

// checkBehavior checks ReadSwapBehavior's contract: one of the package's
// constants, NoSwap or LimitedSwap without an error, Unknown with one.
func checkBehavior(t *testing.T, what, got string, err error) {
	t.Helper()
	switch {
	case err == nil && (got == v1alpha1.SwapBehaviorNoSwap || got == v1alpha1.SwapBehaviorLimitedSwap):
	case err != nil && got == v1alpha1.SwapBehaviorUnknown:
	default:
		t.Fatalf("%s: ReadSwapBehavior = %q, %v", what, got, err)
	}
}
