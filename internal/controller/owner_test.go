package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestOwnedLeaseLock: the leader election Lease is owned by the
// controller's Deployment when the lock creates it, and a Lease made
// without the owner (by an older controller) gets it at the lock's next
// update, with its other owners kept.
func TestOwnedLeaseLock(t *testing.T) {
	ctx := context.Background()
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dra-swap", Name: "ctrl", UID: "deployment-uid"}}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "other-uid"}
	record := resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 15,
		AcquireTime: metav1.NewTime(time.Unix(1, 0)), RenewTime: metav1.NewTime(time.Unix(1, 0))}
	tests := []struct {
		name     string
		existing *coordinationv1.Lease
		want     []metav1.OwnerReference
	}{
		{name: "created owned", want: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "ctrl", UID: "deployment-uid"}}},
		{
			name:     "existing Lease adopted at the next update",
			existing: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "dra-swap", Name: "ctrl", OwnerReferences: []metav1.OwnerReference{other}}},
			want:     []metav1.OwnerReference{other, {APIVersion: "apps/v1", Kind: "Deployment", Name: "ctrl", UID: "deployment-uid"}},
		},
		{
			name: "already owned: kept once",
			existing: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "dra-swap", Name: "ctrl",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "ctrl", UID: "deployment-uid"}}}},
			want: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "ctrl", UID: "deployment-uid"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(deployment)
			if tc.existing != nil {
				if _, err := client.CoordinationV1().Leases("dra-swap").Create(ctx, tc.existing, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			owner, err := deploymentOwner(ctx, client, "dra-swap", "ctrl")
			if err != nil {
				t.Fatal(err)
			}
			lock, err := ownedLeaseLock(client, "dra-swap", "ctrl", owner)
			if err != nil {
				t.Fatal(err)
			}
			if tc.existing == nil {
				err = lock.Create(ctx, record)
			} else if _, _, err = lock.Get(ctx); err == nil {
				err = lock.Update(ctx, record)
			}
			if err != nil {
				t.Fatal(err)
			}
			lease, err := client.CoordinationV1().Leases("dra-swap").Get(ctx, "ctrl", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(lease.OwnerReferences, tc.want) {
				t.Errorf("owners %v, want %v", lease.OwnerReferences, tc.want)
			}
			if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "me" {
				t.Errorf("holder %v, want me", lease.Spec.HolderIdentity)
			}
		})
	}
	if _, err := deploymentOwner(ctx, fake.NewClientset(), "dra-swap", "ctrl"); err == nil {
		t.Error("deploymentOwner of a missing Deployment: no error")
	}
}
