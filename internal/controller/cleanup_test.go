package controller

import (
	"context"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

func TestRemoveNodeLabels(t *testing.T) {
	others := map[string]string{podlabels.Zone: "z1", podlabels.Hostname: "h", "team": "a", "dra.swap/other": "x"}
	with := func(extra map[string]string) map[string]string {
		out := maps.Clone(others)
		maps.Copy(out, extra)
		return out
	}
	tests := []struct {
		name        string
		nodes       map[string]map[string]string // name -> labels
		maxNodes    int
		want        map[string]map[string]string // name -> labels afterwards
		wantPatched int
		wantErr     string
	}{
		{
			name: "owned keys removed, other labels and nodes untouched",
			nodes: map[string]map[string]string{
				"both":  with(map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi"}),
				"one":   with(map[string]string{v1alpha1.LabelCapacity: "1Gi"}),
				"none":  others,
				"empty": nil,
			},
			maxNodes:    10,
			want:        map[string]map[string]string{"both": others, "one": others, "none": others, "empty": nil},
			wantPatched: 2,
		},
		{
			name:     "no node has them",
			nodes:    map[string]map[string]string{"a": others},
			maxNodes: 10,
			want:     map[string]map[string]string{"a": others},
		},
		{
			name: "more labeled nodes than the bound: an error, not an endless walk",
			nodes: map[string]map[string]string{
				"a": {v1alpha1.LabelSwapBehavior: "NoSwap"}, "b": {v1alpha1.LabelSwapBehavior: "NoSwap"}, "c": {v1alpha1.LabelSwapBehavior: "NoSwap"},
			},
			maxNodes: 2,
			wantErr:  "more than 2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for name, l := range tc.nodes {
				objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
			}
			client := fake.NewClientset(objs...)
			_, ctx := ktesting.NewTestContext(t)
			patched, err := RemoveNodeLabels(ctx, client, tc.maxNodes)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RemoveNodeLabels: %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if patched != tc.wantPatched {
				t.Errorf("patched %d nodes, want %d", patched, tc.wantPatched)
			}
			for name, want := range tc.want {
				n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(n.Labels, want) {
					t.Errorf("node %s labels %v, want %v", name, n.Labels, want)
				}
			}
			patches := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "patch" {
					patches++
				}
			}
			if patches != tc.wantPatched {
				t.Errorf("%d patch requests, want %d (one per node with an owned label)", patches, tc.wantPatched)
			}
		})
	}
}
