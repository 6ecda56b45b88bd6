package publish

import (
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deviceTaints are the NoSchedule taints the plugin puts on the node's
// swap device, each with the time it was added: kept as it was while the
// taint stays, so the published device changes only when a taint comes,
// goes or changes its value.
type deviceTaints struct {
	mu     sync.Mutex
	active map[string]resourceapi.DeviceTaint
}

// set adds or updates a taint and reports whether it was not set before.
func (t *deviceTaints) set(key, value string, now time.Time) (added bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active == nil {
		t.active = map[string]resourceapi.DeviceTaint{}
	}
	old, ok := t.active[key]
	if ok && old.Value == value {
		return false
	}
	since := metav1.NewTime(now.Truncate(time.Second))
	if ok {
		since = *old.TimeAdded
	}
	t.active[key] = resourceapi.DeviceTaint{Key: key, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &since}
	return !ok
}

// clear removes a taint and reports whether it was set.
func (t *deviceTaints) clear(key string) (removed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.active[key]
	delete(t.active, key)
	return ok
}

// list returns the taints ordered by key.
func (t *deviceTaints) list() []resourceapi.DeviceTaint {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]resourceapi.DeviceTaint, 0, len(t.active))
	for _, k := range slices.Sorted(maps.Keys(t.active)) {
		out = append(out, t.active[k])
	}
	return out
}

// value returns a taint's value and whether it is set.
func (t *deviceTaints) value(key string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	taint, ok := t.active[key]
	return taint.Value, ok
}

// has reports whether a taint is set.
func (t *deviceTaints) has(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.active[key]
	return ok
}
