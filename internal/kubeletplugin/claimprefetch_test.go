package kubeletplugin

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

func TestClaimPrefetch(t *testing.T) {
	claim := func(ns, name string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid")}}
	}
	tests := []struct {
		name   string
		claims []*drapb.Claim
		// gets: the GETs the API server sees in all; fromHelper: those
		// the handler's reads cause.
		gets, fromHelper int
		wantErr          string
	}{
		{name: "one claim is the helper's read", claims: []*drapb.Claim{{Namespace: "a", Name: "c1"}}, gets: 1, fromHelper: 1},
		{name: "several are prefetched", claims: []*drapb.Claim{{Namespace: "a", Name: "c1"}, {Namespace: "a", Name: "c2"}, {Namespace: "b", Name: "c3"}}, gets: 3},
		{name: "a missing claim is read again by the helper", claims: []*drapb.Claim{{Namespace: "a", Name: "c1"}, {Namespace: "a", Name: "gone"}},
			gets: 3, fromHelper: 1, wantErr: `resourceclaims.resource.k8s.io "gone" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(claim("a", "c1"), claim("a", "c2"), claim("b", "c3"))
			p := &claimPrefetch{client: client}
			helperClient := prefetchingClient{Interface: client}
			var before int
			var gotErr error
			handler := func(ctx context.Context, req any) (any, error) {
				before = len(client.Actions())
				for _, c := range req.(*drapb.NodePrepareResourcesRequest).Claims {
					got, err := helperClient.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
					if err != nil {
						gotErr = err
						continue
					}
					if got.Name != c.Name || got.Namespace != c.Namespace {
						t.Errorf("asked for %s/%s, got %s/%s", c.Namespace, c.Name, got.Namespace, got.Name)
					}
					got.Labels = map[string]string{"changed": "by the caller"}
				}
				return nil, nil
			}
			if _, err := p.interceptor(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: tc.claims}, nil, handler); err != nil {
				t.Fatal(err)
			}
			if n := len(client.Actions()); n != tc.gets || n-before != tc.fromHelper {
				t.Errorf("%d GETs in all, %d from the helper; want %d and %d", n, n-before, tc.gets, tc.fromHelper)
			}
			if (gotErr == nil) != (tc.wantErr == "") || gotErr != nil && gotErr.Error() != tc.wantErr {
				t.Errorf("error %v, want %q", gotErr, tc.wantErr)
			}
		})
	}
	// Other calls pass through untouched.
	called := false
	if _, err := (&claimPrefetch{client: fake.NewClientset()}).interceptor(context.Background(), &drapb.NodeUnprepareResourcesRequest{}, nil,
		func(ctx context.Context, req any) (any, error) {
			called = ctx.Value(prefetchedKey{}) == nil
			return nil, nil
		}); err != nil || !called {
		t.Errorf("unprepare: handler called without prefetch %v, err %v", called, err)
	}
}
