package kubeletplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

// The plugin does not start on a checkpoint a newer release wrote (it
// would start empty and remove the CDI specs its claims own); a corrupt
// one of this version is set aside and the plugin starts empty.
func TestOpenCheckpoint(t *testing.T) {
	const boot = "boot-1"
	for _, tc := range []struct {
		name, content string
		wantErr       string
		wantAside     bool
	}{
		{name: "newer version", content: `{"version":2,"bootID":"boot-1","claims":{}}`, wantErr: "format version 2, newer than version 1"},
		{name: "corrupt", content: `{"version":1,"bootID":"boot-1","claims":`, wantAside: true},
		{name: "current", content: `{"version":1,"bootID":"boot-1","claims":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := openCheckpoint(ctx, checkpoint.NewStore(path, boot))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, checkpoint.ErrNewerVersion) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("openCheckpoint = %v, want an error containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(path + ".unusable")
			if aside := statErr == nil; aside != tc.wantAside {
				t.Errorf("set aside %v, want %v", aside, tc.wantAside)
			}
		})
	}
}
