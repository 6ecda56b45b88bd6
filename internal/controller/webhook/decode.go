package webhook

import (
	"encoding/json"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// What the handlers read of the objects in a review, and nothing else: a
// review is decoded into these views, so the fields the handlers never
// read (labels, annotations, managed fields, selectors, device statuses…)
// are skipped by the decoder's scanner instead of being allocated, and
// every list the handlers read is counted before its elements are decoded
// (limitedList): a list longer than the API server ever sends is refused
// from its count, and what one review can allocate is its body's size and
// a few lists the API bounds.

// limit is a list's bound, as a type (a limitedList's second parameter).
type limit interface{ max() int }

type (
	maxRequestsLimit    struct{}
	maxSubRequestsLimit struct{}
	maxConfigsLimit     struct{}
	maxReservedForLimit struct{}
	maxResultsLimit     struct{}
)

func (maxRequestsLimit) max() int    { return MaxRequests }
func (maxSubRequestsLimit) max() int { return MaxSubRequests }
func (maxConfigsLimit) max() int     { return MaxConfigs }
func (maxReservedForLimit) max() int { return MaxReservedFor }
func (maxResultsLimit) max() int     { return MaxResults }

// limitedList is a JSON array whose elements are decoded only when there
// are at most L's; Count is how many there are either way.
type limitedList[T any, L limit] struct {
	Items []T
	Count int
}

// UnmarshalJSON counts the array's elements, then decodes them if there
// are not too many.
func (l *limitedList[T, L]) UnmarshalJSON(data []byte) error {
	n, err := countElements(data)
	if err != nil {
		return err
	}
	l.Items, l.Count = nil, n
	var bound L
	if n == 0 || n > bound.max() {
		return nil
	}
	return json.Unmarshal(data, &l.Items)
}

// over reports whether the list had more elements than its bound.
func (l *limitedList[T, L]) over() bool {
	var bound L
	return l.Count > bound.max()
}

var errNotArray = errors.New("not a JSON array")

// countElements counts the elements of a JSON array without decoding
// them. data is a whole JSON value (json.Unmarshal checks the document
// before it calls an UnmarshalJSON method); null has none.
func countElements(data []byte) (int, error) {
	start, end := 0, len(data)
	for start < end && isSpace(data[start]) {
		start++
	}
	for end > start && isSpace(data[end-1]) {
		end--
	}
	if string(data[start:end]) == "null" {
		return 0, nil
	}
	if end-start < 2 || data[start] != '[' || data[end-1] != ']' {
		return 0, errNotArray
	}
	depth, commas, empty := 0, 0, true
	inString, escaped := false, false
	for _, c := range data[start+1 : end-1] {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case isSpace(c):
		case c == '"':
			inString, empty = true, false
		case c == '[' || c == '{':
			depth++
			empty = false
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			commas++
		default:
			empty = false
		}
	}
	if empty {
		return 0, nil
	}
	return commas + 1, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// claimSpecView is what the config validator reads of a claim's spec.
type claimSpecView struct {
	Devices struct {
		Requests limitedList[requestView, maxRequestsLimit] `json:"requests"`
		Config   limitedList[configView, maxConfigsLimit]   `json:"config"`
	} `json:"devices"`
}

// overLimits reports whether a list of the spec is longer than the API
// allows.
func (v *claimSpecView) overLimits() bool {
	if v.Devices.Requests.over() || v.Devices.Config.over() {
		return true
	}
	for i := range v.Devices.Requests.Items {
		if v.Devices.Requests.Items[i].FirstAvailable.over() {
			return true
		}
	}
	return false
}

// requestView is a request: the classes it asks for and their swap.
type requestView struct {
	Exactly        *classRequestView                                  `json:"exactly"`
	FirstAvailable limitedList[classRequestView, maxSubRequestsLimit] `json:"firstAvailable"`
}

// classRequestView is an exact request or a subrequest: its class and the
// swap capacity it requests (no other capacity is decoded).
type classRequestView struct {
	DeviceClassName string `json:"deviceClassName"`
	Capacity        *struct {
		Requests struct {
			Swap *resource.Quantity `json:"swap"`
		} `json:"requests"`
	} `json:"capacity"`
}

// swap is the swap the request asks for, if it names any.
func (r *classRequestView) swap() (resource.Quantity, bool) {
	if r.Capacity == nil || r.Capacity.Requests.Swap == nil {
		return resource.Quantity{}, false
	}
	return *r.Capacity.Requests.Swap, true
}

// configView is a claim's or class's config: its opaque part.
type configView struct {
	Opaque *struct {
		Driver     string          `json:"driver"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"opaque"`
}

// claimView is a ResourceClaim in a config review.
type claimView struct {
	Spec claimSpecView `json:"spec"`
}

// templateView is a ResourceClaimTemplate in a config review.
type templateView struct {
	Spec struct {
		Spec claimSpecView `json:"spec"`
	} `json:"spec"`
}

// classView is a DeviceClass in a config review.
type classView struct {
	Spec struct {
		Config limitedList[configView, maxConfigsLimit] `json:"config"`
	} `json:"spec"`
}

// claimStatusView is what the reservation labeler reads of a claim.
type claimStatusView struct {
	Metadata struct {
		Name            string    `json:"name"`
		Namespace       string    `json:"namespace"`
		UID             types.UID `json:"uid"`
		ResourceVersion string    `json:"resourceVersion"`
	} `json:"metadata"`
	Status struct {
		Allocation *struct {
			Devices struct {
				Results limitedList[resultView, maxResultsLimit] `json:"results"`
			} `json:"devices"`
		} `json:"allocation"`
		ReservedFor limitedList[resourceapi.ResourceClaimConsumerReference, maxReservedForLimit] `json:"reservedFor"`
	} `json:"status"`
}

// resultView is an allocation result: its driver and pool.
type resultView struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
}

// overLimits says which list of the claim is longer than the API allows,
// "" if none is.
func (v *claimStatusView) overLimits() string {
	switch {
	case v.Status.ReservedFor.over():
		return fmt.Sprintf("more than %d reservedFor entries", MaxReservedFor)
	case v.Status.Allocation != nil && v.Status.Allocation.Devices.Results.over():
		return fmt.Sprintf("more than %d allocation results", MaxResults)
	}
	return ""
}

// claim is the view as a ResourceClaim holding only what the view holds.
func (v *claimStatusView) claim() *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{}
	c.Name, c.Namespace, c.UID, c.ResourceVersion = v.Metadata.Name, v.Metadata.Namespace, v.Metadata.UID, v.Metadata.ResourceVersion
	if a := v.Status.Allocation; a != nil {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, r := range a.Devices.Results.Items {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{Driver: r.Driver, Pool: r.Pool})
		}
	}
	c.Status.ReservedFor = v.Status.ReservedFor.Items
	return c
}

// bindingView is what the binding labeler reads of a Binding.
type bindingView struct {
	Metadata struct {
		UID types.UID `json:"uid"`
	} `json:"metadata"`
	Target struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"target"`
}
