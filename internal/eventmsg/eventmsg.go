// Package eventmsg bounds the messages of events and conditions to what
// the API server accepts, so that none is rejected and lost. It uses only
// the standard library: the hook links it without client-go.
//
// Lengths are counted in bytes of UTF-8, as the API server counts them
// (len of the decoded string), and text is cut on rune boundaries.
package eventmsg

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// NoteLimit is the most bytes an event's note may hold: an
	// events.k8s.io/v1 Event's note, or a core/v1 Event's message when the
	// event has an eventTime (NoteLengthLimit of
	// k8s.io/kubernetes/pkg/apis/core/validation/events.go). Longer events
	// are refused by the API server.
	NoteLimit = 1024
	// ConditionLimit is the most bytes a metav1.Condition's message may
	// hold (maxMessageLen of k8s.io/apimachinery/pkg/apis/meta/v1/validation).
	ConditionLimit = 32 * 1024
	// Marker ends text that was cut.
	Marker = "… (truncated)"
)

// Truncate returns s cut to at most limit bytes of valid UTF-8: s itself
// if it fits, else its longest prefix that leaves room for Marker, cut on a
// rune boundary, followed by Marker. Invalid UTF-8 is first replaced by
// U+FFFD, as a JSON encoder would, so that the bound holds for what the API
// server decodes. A limit too small for Marker cuts without one.
func Truncate(s string, limit int) string {
	if limit <= 0 {
		return ""
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= limit {
		return s
	}
	marker := Marker
	if limit < 2*len(Marker) {
		marker = ""
	}
	return prefix(s, limit-len(marker)) + marker
}

// prefix is the longest prefix of the valid UTF-8 s with at most n bytes
// that ends on a rune boundary.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Note formats an event's note and bounds it to NoteLimit.
func Note(format string, args ...any) string {
	return Truncate(fmt.Sprintf(format, args...), NoteLimit)
}

// Condition bounds a condition's message to ConditionLimit.
func Condition(message string) string {
	return Truncate(message, ConditionLimit)
}

// List joins items with sep, naming at most most of them (any number if
// most <= 0) and no more than fit in limit bytes together with the summary
// of the rest: when it leaves items out it ends with "… and N more". The
// first item is named, cut to fit if it must, unless limit leaves no room
// for it (limit should be at least 64). The result never exceeds limit.
func List(items []string, sep string, most, limit int) string {
	if all := strings.ToValidUTF8(strings.Join(items, sep), "\uFFFD"); (most <= 0 || len(items) <= most) && len(all) <= limit {
		return all
	}
	var b strings.Builder
	named := 0
	for i, item := range items {
		if most > 0 && i == most {
			break
		}
		item = strings.ToValidUTF8(item, "\uFFFD")
		room := limit - b.Len()
		if i > 0 {
			room -= len(sep)
		}
		if rest := len(items) - i - 1; rest > 0 {
			room -= len(sep) + len(more(rest))
		}
		if len(item) > room {
			if i > 0 || room < 2*len(Marker) {
				break
			}
			item = Truncate(item, room)
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(item)
		named++
	}
	if left := len(items) - named; left > 0 {
		if named > 0 {
			b.WriteString(sep)
		}
		b.WriteString(more(left))
	}
	return Truncate(b.String(), limit)
}

func more(n int) string {
	return fmt.Sprintf("… and %d more", n)
}
