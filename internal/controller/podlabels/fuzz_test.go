package podlabels

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

func FuzzParseManaged(f *testing.F) {
	for _, seed := range []string{
		"",
		Zone + "," + Hostname + "," + v1alpha1.LabelSwapBehavior,
		"example.com/rack,topology.kubernetes.io/region",
		" example.com/rack , ,topology.kubernetes.io/zone,",
		"a,b/c,-bad,bad-,UPPER.example.com/x,x/",
		"example.com/" + string(make([]byte, 70)),
		"kubernetes.io/hostname\t,\u00a0zone",
		",,,",
		"a/b/c,/x,x/,é",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		keys := ParseManaged(v)
		set := map[string]string{}
		for _, k := range keys {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				t.Fatalf("ParseManaged(%q) returned key %q, not a label key: %v", v, k, errs)
			}
			if _, dup := set[k]; dup {
				t.Fatalf("ParseManaged(%q) returned key %q twice: %q", v, k, keys)
			}
			set[k] = ""
		}
		// The annotation the driver would write for those keys parses
		// back to them.
		back := ParseManaged(Managed(set))
		sorted := slices.Sorted(slices.Values(keys))
		if !slices.Equal(back, sorted) {
			t.Fatalf("ParseManaged(Managed(%q)) = %q, want %q", keys, back, sorted)
		}
	})
}
