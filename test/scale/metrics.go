package scale

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// maxSamples bounds what parseMetrics reads of one scrape.
const maxSamples = 200000

// parseMetrics reads the Prometheus text exposition format: comments are
// skipped, label values may not contain '",' pairs escaped otherwise than
// \" (which the components here do not emit).
func parseMetrics(text []byte) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if len(out) >= maxSamples {
			return nil, fmt.Errorf("more than %d samples", maxSamples)
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	var rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return sample{}, fmt.Errorf("metric line %q: unbalanced braces", line)
		}
		s.name = line[:i]
		if err := parseLabels(line[i+1:j], s.labels); err != nil {
			return sample{}, fmt.Errorf("metric line %q: %w", line, err)
		}
		rest = line[j+1:]
	} else {
		name, r, ok := strings.Cut(line, " ")
		if !ok {
			return sample{}, fmt.Errorf("metric line %q: no value", line)
		}
		s.name, rest = name, r
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return sample{}, fmt.Errorf("metric line %q: no value", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return sample{}, fmt.Errorf("metric line %q: %w", line, err)
	}
	s.value = v
	return s, nil
}

func parseLabels(text string, into map[string]string) error {
	for text != "" {
		name, rest, ok := strings.Cut(text, `="`)
		if !ok {
			return fmt.Errorf("label %q: no value", text)
		}
		var value strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			value.WriteByte(rest[i])
		}
		if i == len(rest) {
			return fmt.Errorf("label %s: unterminated value", name)
		}
		into[strings.TrimSpace(name)] = value.String()
		text = strings.TrimPrefix(rest[i+1:], ",")
	}
	return nil
}

// matches reports whether s has every label of want.
func (s sample) matches(want map[string]string) bool {
	for k, v := range want {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// sum adds the samples of name that have the labels of want.
func sum(samples []sample, name string, want map[string]string) float64 {
	var total float64
	for _, s := range samples {
		if s.name == name && s.matches(want) {
			total += s.value
		}
	}
	return total
}

// histogram is a cumulative Prometheus histogram, summed over the series
// that match.
type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative
}

func histogramOf(samples []sample, name string, want map[string]string) (histogram, error) {
	byBound := map[float64]float64{}
	for _, s := range samples {
		if s.name != name+"_bucket" || !s.matches(want) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			return histogram{}, fmt.Errorf("%s: bucket le=%q: %w", name, s.labels["le"], err)
		}
		byBound[le] += s.value
	}
	var h histogram
	for le := range byBound {
		h.bounds = append(h.bounds, le)
	}
	slices.Sort(h.bounds)
	for _, le := range h.bounds {
		h.counts = append(h.counts, byBound[le])
	}
	return h, nil
}

// count is the number of observations.
func (h histogram) count() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linearly within the bucket it falls in; the highest finite bound when it
// falls in +Inf; NaN without observations.
func (h histogram) quantile(q float64) float64 {
	n := h.count()
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.bounds[i-1]
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = h.bounds[i-1], h.counts[i-1]
		}
		if c == below {
			return h.bounds[i]
		}
		return lower + (h.bounds[i]-lower)*(rank-below)/(c-below)
	}
	return h.bounds[len(h.bounds)-1]
}

// minus is h with the observations of before taken out (the same series
// scraped earlier).
func (h histogram) minus(before histogram) histogram {
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts)}
	for i, le := range out.bounds {
		if j := slices.Index(before.bounds, le); j >= 0 {
			out.counts[i] -= before.counts[j]
		}
	}
	return out
}
