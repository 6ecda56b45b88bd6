package controller

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestWebhookRESTConfig: the webhooks' client has a rate limiter of its
// own, with its own QPS and burst, and the reconcilers' configuration is
// left as it was.
func TestWebhookRESTConfig(t *testing.T) {
	shared := flowcontrol.NewTokenBucketRateLimiter(50, 100)
	tests := []struct {
		name      string
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{name: "own limits", qps: 200, burst: 400, wantQPS: 200, wantBurst: 400},
		{name: "zero takes the base's", wantQPS: 50, wantBurst: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := &rest.Config{Host: "https://example.invalid", QPS: 50, Burst: 100, RateLimiter: shared}
			got := webhookRESTConfig(base, tc.qps, tc.burst)
			if got.RateLimiter != nil {
				t.Errorf("the webhooks' client shares the reconcilers' rate limiter")
			}
			if got.QPS != tc.wantQPS || got.Burst != tc.wantBurst {
				t.Errorf("QPS %v burst %d, want %v and %d", got.QPS, got.Burst, tc.wantQPS, tc.wantBurst)
			}
			if base.QPS != 50 || base.Burst != 100 || base.RateLimiter != shared {
				t.Errorf("the base configuration changed: QPS %v burst %d", base.QPS, base.Burst)
			}
		})
	}
}
