package pressure

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*Config)
		wantErr []string // substrings of the error; none means valid
	}{
		{name: "defaults", modify: func(*Config) {}},
		{name: "zero durations", modify: func(c *Config) { c.SetAfter, c.ClearAfter = 0, 0 }},
		{name: "upper bounds", modify: func(c *Config) {
			c.PressureSomeThreshold, c.PressureFullThreshold, c.SwapFullThreshold = 100, 100, 1
		}},
		{name: "tiny clear thresholds", modify: func(c *Config) {
			c.PressureSomeClear, c.PressureFullClear, c.SwapFullClear = 0.01, 0.01, 0.001
		}},
		{
			name:    "zero config",
			modify:  func(c *Config) { *c = Config{} },
			wantErr: []string{"PressureSomeThreshold 0", "PressureFullClear 0", "SwapFullThreshold 0"},
		},
		{
			name:    "some threshold above 100",
			modify:  func(c *Config) { c.PressureSomeThreshold = 100.5 },
			wantErr: []string{"PressureSomeThreshold 100.5 is not within (0, 100]"},
		},
		{
			name:    "full threshold negative",
			modify:  func(c *Config) { c.PressureFullThreshold = -1 },
			wantErr: []string{"PressureFullThreshold -1", "PressureFullClear 5 must be above 0 and below PressureFullThreshold -1"},
		},
		{
			name:    "swap threshold as a percentage",
			modify:  func(c *Config) { c.SwapFullThreshold, c.SwapFullClear = 90, 80 },
			wantErr: []string{"SwapFullThreshold 90 is not within (0, 1]"},
		},
		{
			name:    "clear equal to set",
			modify:  func(c *Config) { c.PressureSomeClear = c.PressureSomeThreshold },
			wantErr: []string{"PressureSomeClear 30 must be above 0 and below PressureSomeThreshold 30"},
		},
		{
			name:    "clear above set",
			modify:  func(c *Config) { c.SwapFullClear = 0.95 },
			wantErr: []string{"SwapFullClear 0.95"},
		},
		{
			name:    "clear zero",
			modify:  func(c *Config) { c.PressureFullClear = 0 },
			wantErr: []string{"PressureFullClear 0"},
		},
		{
			name:    "NaN",
			modify:  func(c *Config) { c.PressureSomeThreshold, c.SwapFullClear = math.NaN(), math.NaN() },
			wantErr: []string{"PressureSomeThreshold NaN", "PressureSomeClear 15", "SwapFullClear NaN"},
		},
		{
			name:    "infinite",
			modify:  func(c *Config) { c.PressureFullThreshold = math.Inf(1) },
			wantErr: []string{"PressureFullThreshold +Inf"},
		},
		{
			name:    "negative durations",
			modify:  func(c *Config) { c.SetAfter, c.ClearAfter = -time.Second, -time.Minute },
			wantErr: []string{"SetAfter -1s is negative", "ClearAfter -1m0s is negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.modify(&cfg)
			err := cfg.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors containing %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	want := Config{
		PressureSomeThreshold: 30,
		PressureFullThreshold: 10,
		PressureSomeClear:     15,
		PressureFullClear:     5,
		SwapFullThreshold:     0.9,
		SwapFullClear:         0.8,
		SetAfter:              30 * time.Second,
		ClearAfter:            5 * time.Minute,
	}
	if got := DefaultConfig(); got != want {
		t.Errorf("DefaultConfig() = %+v, want %+v", got, want)
	}
}
