package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// DefaultKubeletConfigPath is where kubeadm (and kind, built on it) puts
// the kubelet's --config file.
const DefaultKubeletConfigPath = "/var/lib/kubelet/config.yaml"

// dropInExtension is the extension of the kubelet's drop-in configuration
// files; other files in --config-dir are ignored, as the kubelet does.
const dropInExtension = ".conf"

// ErrNoKubeletConfig says that neither a kubelet configuration file nor a
// drop-in directory was given, so nothing tells the swap behavior.
var ErrNoKubeletConfig = errors.New("no kubelet configuration file or drop-in directory given (the kubelet config path is empty)")

// ErrKubeletConfigReplaced says that the kubelet's configuration file (or
// drop-in directory) read is a deleted one: it was replaced on the host
// (renamed over, as sed -i, most editors and configuration managers do)
// after it was bind-mounted into the plugin's container, whose mount keeps
// showing the old file. Only a new container sees the new one.
var ErrKubeletConfigReplaced = errors.New("it was replaced on the host after this container mounted it, and the mount still shows the old, deleted file; a restarted container reads the new one")

// ReadSwapBehavior returns the kubelet's memorySwap.swapBehavior
// (SwapBehaviorNoSwap, SwapBehaviorLimitedSwap, or KEP-5359's
// SwapBehaviorWorkloadControlledSwap) from the configuration
// file configPath and, when configDir is not empty, the drop-in files
// ending in .conf under configDir, which are applied over the main file in
// lexical order (walking subdirectories, as the kubelet does). Both paths
// are host paths read under root. An empty configPath means the kubelet
// has no configuration file (k3s and EKS keep theirs in drop-ins only); a
// drop-in overrides the behavior only when it sets a non-empty value; an
// empty result means the kubelet's default, NoSwap.
//
// When neither path is given, a file cannot be read or parsed, or the
// behavior is not one the kubelet knows, it returns SwapBehaviorUnknown
// and an error naming the file or the value (ErrNoKubeletConfig when no
// path was given, ErrKubeletConfigReplaced when what it read is a deleted
// file or directory).
func ReadSwapBehavior(root, configPath, configDir string) (string, error) {
	if configPath == "" && configDir == "" {
		return v1alpha1.SwapBehaviorUnknown, ErrNoKubeletConfig
	}
	var behavior, source string
	if configPath != "" {
		source = hostPath(root, configPath)
		if err := checkNotReplaced(source); err != nil {
			return v1alpha1.SwapBehaviorUnknown, err
		}
		b, err := swapBehaviorFromFile(source)
		if err != nil {
			return v1alpha1.SwapBehaviorUnknown, err
		}
		behavior = b
	}
	if configDir != "" {
		if err := checkNotReplaced(hostPath(root, configDir)); err != nil {
			return v1alpha1.SwapBehaviorUnknown, err
		}
		dropIns, err := dropInFiles(hostPath(root, configDir))
		if err != nil {
			return v1alpha1.SwapBehaviorUnknown, err
		}
		for _, path := range dropIns {
			b, err := swapBehaviorFromFile(path)
			if err != nil {
				return v1alpha1.SwapBehaviorUnknown, err
			}
			if b != "" {
				behavior, source = b, path
			}
		}
	}
	switch behavior {
	case "":
		return v1alpha1.SwapBehaviorNoSwap, nil
	case v1alpha1.SwapBehaviorNoSwap, v1alpha1.SwapBehaviorLimitedSwap, v1alpha1.SwapBehaviorWorkloadControlledSwap:
		return behavior, nil
	default:
		return v1alpha1.SwapBehaviorUnknown, fmt.Errorf("kubelet memorySwap.swapBehavior %q in %s is none of %s, %s and %s", behavior, source,
			v1alpha1.SwapBehaviorNoSwap, v1alpha1.SwapBehaviorLimitedSwap, v1alpha1.SwapBehaviorWorkloadControlledSwap)
	}
}

// checkNotReplaced returns ErrKubeletConfigReplaced when path is a
// deleted file or directory (no link left: only a mount holds it). A path
// that cannot be read is left to the reader's error.
func checkNotReplaced(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil && st.Nlink == 0 {
		return fmt.Errorf("kubelet configuration %s: %w", path, ErrKubeletConfigReplaced)
	}
	return nil
}

// swapBehaviorFromFile returns memorySwap.swapBehavior as set in one
// kubelet configuration file, "" when the file does not set it. Unknown
// fields are ignored; YAML that does not parse, or a field of the wrong
// type, is an error.
func swapBehaviorFromFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read kubelet configuration: %w", err)
	}
	var cfg kubeletconfig.KubeletConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("parse kubelet configuration %s: %w", path, err)
	}
	return cfg.MemorySwap.SwapBehavior, nil
}

// dropInFiles lists the files ending in .conf under dir, in the order the
// kubelet applies them (filepath.WalkDir's lexical order). A missing
// directory is an error, as it is for the kubelet.
func dropInFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(d.Name()) == dropInExtension {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list kubelet drop-in configuration directory: %w", err)
	}
	return files, nil
}
