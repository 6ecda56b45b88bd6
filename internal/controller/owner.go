package controller

import (
	"context"
	"fmt"
	"os"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/servingcert"
)

// The objects the controller creates for itself, the leader election
// Lease and the self-managed webhook certificate Secret, are owned by its
// Deployment (an ownerReference, which only names the Deployment): when
// helm uninstall deletes the Deployment, the garbage collector deletes
// them. The chart cannot make them itself: helm would then own their
// fields and reset the certificate on upgrade, and a release whose
// controller made them already could not be upgraded (helm refuses to
// adopt an object it did not make). An object made before the owner was
// given gets the reference at its next write (the Lease within seconds,
// the Secret at the leader's next certificate check).

// deploymentOwner is the ownerReference to the Deployment namespace/name.
func deploymentOwner(ctx context.Context, client kubernetes.Interface, namespace, name string) (metav1.OwnerReference, error) {
	d, err := client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("read the owner Deployment %s/%s: %w", namespace, name, err)
	}
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID}, nil
}

// ownedLeaseLock is client-go's Lease lock whose Lease, when created or
// updated, is owned by owner.
func ownedLeaseLock(client kubernetes.Interface, namespace, name string, owner metav1.OwnerReference) (resourcelock.Interface, error) {
	id, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader election identity: %w", err)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     ownedLeases{LeasesGetter: client.CoordinationV1(), owner: owner},
		LockConfig: resourcelock.ResourceLockConfig{Identity: id + "_" + string(uuid.NewUUID())},
	}, nil
}

// ownedLeases adds owner to every Lease it creates or updates.
type ownedLeases struct {
	coordinationv1client.LeasesGetter
	owner metav1.OwnerReference
}

func (o ownedLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return ownedLeaseClient{LeaseInterface: o.LeasesGetter.Leases(namespace), owner: o.owner}
}

type ownedLeaseClient struct {
	coordinationv1client.LeaseInterface
	owner metav1.OwnerReference
}

func (c ownedLeaseClient) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	lease = lease.DeepCopy()
	lease.OwnerReferences, _ = servingcert.WithOwners(lease.OwnerReferences, []metav1.OwnerReference{c.owner})
	return c.LeaseInterface.Create(ctx, lease, opts)
}

func (c ownedLeaseClient) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	lease = lease.DeepCopy()
	lease.OwnerReferences, _ = servingcert.WithOwners(lease.OwnerReferences, []metav1.OwnerReference{c.owner})
	return c.LeaseInterface.Update(ctx, lease, opts)
}
