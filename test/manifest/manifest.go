// Package manifest turns a rendered manifest (`helm template`, `helm get
// manifest`) into objects, and objects into the dynamic clients of their
// API resources, for the tests that check what the chart makes.
package manifest

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// MaxObjects bounds the objects Decode returns from one manifest (the
// chart renders about 30).
const MaxObjects = 1000

// Decode splits a multi-document YAML manifest into its objects; empty
// documents are skipped (each consumes input, so the loop ends). More
// than MaxObjects objects is an error.
func Decode(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		if len(objs) > MaxObjects {
			return nil, fmt.Errorf("manifest holds more than %d objects", MaxObjects)
		}
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifest document %d: %w", len(objs)+1, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Resources finds the API resource of an object on one API server.
type Resources struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewResources uses cfg's server; its discovery is read once and cached
// (objects of a CRD made later need a new Resources).
func NewResources(cfg *rest.Config) (*Resources, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Resources{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

// Resource is an object's API resource.
type Resource struct {
	// Client reaches the resource, in Namespace for a namespaced kind.
	Client dynamic.ResourceInterface
	// Namespaced says whether the kind lives in namespaces.
	Namespaced bool
	// Namespace is the object's own namespace, or the default For was
	// given when it names none; "" for a cluster-scoped kind.
	Namespace string
}

// For returns u's resource; defaultNamespace stands in for a namespaced
// object that names no namespace (as helm does with the release's).
func (r *Resources) For(u *unstructured.Unstructured, defaultNamespace string) (Resource, error) {
	gvk := u.GroupVersionKind()
	mapping, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Resource{}, fmt.Errorf("%s %s: %w", gvk, u.GetName(), err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return Resource{Client: r.dyn.Resource(mapping.Resource)}, nil
	}
	ns := u.GetNamespace()
	if ns == "" {
		ns = defaultNamespace
	}
	return Resource{Client: r.dyn.Resource(mapping.Resource).Namespace(ns), Namespaced: true, Namespace: ns}, nil
}
