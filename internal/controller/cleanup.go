package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// cleanupPageSize is how many Nodes RemoveNodeLabels lists at once.
const cleanupPageSize = 500

// RemoveNodeLabels removes the labels the controller sets on Nodes
// (podlabels.NodeKeys), and only those, from every Node that has one: what
// the chart's post-delete hook runs when the driver is uninstalled. For
// each key it lists the Nodes that have it, a page at a time, and gives
// up with an error once a list has gone past maxNodes Nodes. It returns
// how many Nodes it patched.
func RemoveNodeLabels(ctx context.Context, client kubernetes.Interface, maxNodes int) (int, error) {
	logger := klog.FromContext(ctx)
	patched := 0
	for _, key := range podlabels.NodeKeys() {
		seen, cont := 0, ""
		for {
			list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: key, Limit: cleanupPageSize, Continue: cont})
			if err != nil {
				return patched, fmt.Errorf("list Nodes labeled %s: %w", key, err)
			}
			for i := range list.Items {
				node := &list.Items[i]
				if seen++; seen > maxNodes {
					return patched, fmt.Errorf("list Nodes labeled %s: more than %d, the most this cleanup handles", key, maxNodes)
				}
				change := podlabels.RemoveNodeLabels(node.Labels)
				if len(change) == 0 {
					continue
				}
				patch, err := change.MergePatch()
				if err != nil {
					return patched, fmt.Errorf("build the label removal patch of Node %s: %w", node.Name, err)
				}
				if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
					if apierrors.IsNotFound(err) {
						continue
					}
					return patched, fmt.Errorf("remove the driver's labels from Node %s: %w", node.Name, err)
				}
				patched++
				logger.V(1).Info("Removed the driver's node labels", "node", node.Name, "patch", string(patch))
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
	}
	return patched, nil
}
