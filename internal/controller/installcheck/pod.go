package installcheck

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The probe pods' names, labels and shape. The chart's admission policy
// for the test's account (templates/helm-test-policy.yaml) admits only
// pods of this shape, and a test creates ProbePod's pods with that
// account's token.
const (
	// LabelComponent is app.kubernetes.io/component; a probe's value is
	// ProbeComponent. The policy lets the test's account delete only pods
	// with it.
	LabelComponent = "app.kubernetes.io/component"
	ProbeComponent = "helm-test-probe"
	// LabelRun is the run's ID (Config.RunID) on each probe it created.
	LabelRun = "dra.swap/helm-test-run"
	// AnnotationNode is the node a probe checks, AnnotationKind whether it
	// has a claim (KindClaim) or not (KindNoClaim).
	AnnotationNode = "dra.swap/probe-node"
	AnnotationKind = "dra.swap/probe"
	KindClaim      = "claim"
	KindNoClaim    = "no-claim"
	// ProbeContainer is the probe's one container; it runs Command with
	// ProbeArgs, and the pod's claim is named ClaimName.
	ProbeContainer = "probe"
	ClaimName      = "swap"
	// probeUID is the image's non-root user.
	probeUID = 65532
)

// ProbeArgs are the probe's arguments.
func ProbeArgs() []string { return []string{Subcommand, "--probe"} }

// ProbePod is the probe for node: pinned to it by name (a node affinity on
// metadata.name, so that the scheduler still allocates the claim),
// tolerating NoSchedule taints (control-plane nodes run the plugin too),
// without a ServiceAccount token, volumes, host namespaces or
// privileges, with a memory request below its limit (Burstable, so that a
// kubelet under LimitedSwap would give it swap without a claim) and, with
// withClaim, a claim from cfg.ClaimTemplate that its container
// references. It has no priority class: the driver gives critical pods no
// swap, and the chart's ResourceQuota counts only those classes.
func ProbePod(cfg Config, node string, withClaim bool) *corev1.Pod {
	kind := KindNoClaim
	if withClaim {
		kind = KindClaim
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "dra-swap-probe-",
			Namespace:    cfg.Namespace,
			Labels: map[string]string{
				LabelComponent:              ProbeComponent,
				"app.kubernetes.io/part-of": "dra-driver-swap",
				LabelRun:                    cfg.RunID,
			},
			Annotations: map[string]string{AnnotationNode: node, AnnotationKind: kind},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ServiceAccountName:            "default",
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}},
			}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](probeUID),
				RunAsGroup:     ptr.To[int64](probeUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            ProbeContainer,
				Image:           cfg.Image,
				ImagePullPolicy: cfg.PullPolicy,
				Command:         []string{Command},
				Args:            ProbeArgs(),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				// The report goes to the termination message; if the probe
				// cannot write it there, it exits 1 with the report as
				// its last log line, which the kubelet then takes.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if cfg.TestPodUID != "" && cfg.TestPodName != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: cfg.TestPodName, UID: cfg.TestPodUID}}
	}
	for _, s := range cfg.PullSecrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if withClaim {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: ClaimName, ResourceClaimTemplateName: ptr.To(cfg.ClaimTemplate)}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: ClaimName}}
	}
	return p
}
