package manifest

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
	tests := []struct {
		name     string
		in       string
		wantObjs int
		wantErr  string
	}{
		{name: "empty", in: "", wantObjs: 0},
		{name: "empty documents skipped", in: "---\n" + cm + "---\n---\n" + cm, wantObjs: 2},
		{name: "at the bound", in: strings.Repeat("---\n"+cm, MaxObjects), wantObjs: MaxObjects},
		{name: "above the bound", in: strings.Repeat("---\n"+cm, MaxObjects+1), wantErr: "more than 1000 objects"},
		{name: "bad document", in: cm + "---\nkind: [\n", wantErr: "decode manifest document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := Decode(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != tt.wantObjs {
				t.Errorf("Decode() = %d objects, want %d", len(objs), tt.wantObjs)
			}
		})
	}
}
