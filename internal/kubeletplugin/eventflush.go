package kubeletplugin

import (
	"context"
	"sync"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/tools/events"
)

// nodeEventFlushTimeout bounds how long the plugin waits, before it exits
// on purpose, for the events it told the Node to be written.
const nodeEventFlushTimeout = 10 * time.Second

// nodeEventLedger counts, per reason, the Node events the plugin told
// (told, by the nodeReporter) and those the event broadcaster wrote to the
// API server (written, by its sink), so that the plugin can wait for the
// events that say why it exits: client-go writes them in the background,
// with the context the plugin cancels when it stops.
type nodeEventLedger struct {
	mu      sync.Mutex
	told    map[string]int
	written map[string]int
}

func newNodeEventLedger() *nodeEventLedger {
	return &nodeEventLedger{told: map[string]int{}, written: map[string]int{}}
}

func (l *nodeEventLedger) tell(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.told[reason]++
}

func (l *nodeEventLedger) write(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written[reason]++
}

// flushed reports whether every Node event told so far was written.
func (l *nodeEventLedger) flushed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for reason, n := range l.told {
		if l.written[reason] < n {
			return false
		}
	}
	return true
}

// wait waits until every Node event told so far is written, at most
// timeout (an event folded into an earlier one's series is not written
// again, and the API server may be unreachable), and reports whether they
// were.
func (l *nodeEventLedger) wait(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !l.flushed() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// ledgerSink is the event broadcaster's sink: it writes through to the
// API server and enters each Node event written in the ledger.
type ledgerSink struct {
	events.EventSink
	ledger *nodeEventLedger
}

func (s ledgerSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return s.entered(s.EventSink.Create(ctx, event))
}

func (s ledgerSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return s.entered(s.EventSink.Update(ctx, event))
}

func (s ledgerSink) Patch(ctx context.Context, oldEvent *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.entered(s.EventSink.Patch(ctx, oldEvent, data))
}

func (s ledgerSink) entered(event *eventsv1.Event, err error) (*eventsv1.Event, error) {
	if err == nil && event != nil && event.Regarding.Kind == "Node" {
		s.ledger.write(event.Reason)
	}
	return event, err
}
