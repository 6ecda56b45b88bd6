{{/* Names. */}}
{{- define "dra-swap.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dra-swap.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "dra-swap.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "dra-swap.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The namespace of every namespaced object and of every reference to
one (namespaceOverride, else the release's). */}}
{{- define "dra-swap.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "dra-swap.plugin" -}}{{ include "dra-swap.fullname" . | trunc 50 | trimSuffix "-" }}-kubeletplugin{{- end -}}
{{- define "dra-swap.controller" -}}{{ include "dra-swap.fullname" . | trunc 52 | trimSuffix "-" }}-controller{{- end -}}
{{- define "dra-swap.labelCleanup" -}}{{ include "dra-swap.fullname" . | trunc 48 | trimSuffix "-" }}-label-cleanup{{- end -}}
{{/* The components' ServiceAccount names: the given name, else the
generated one (also when serviceAccount.create is false: the chart then
expects an account of that name). RBAC bindings and the admission policies'
username matches use these. */}}
{{- define "dra-swap.pluginServiceAccount" -}}
{{- default (include "dra-swap.plugin" .) .Values.kubeletPlugin.serviceAccount.name -}}
{{- end -}}
{{- define "dra-swap.controllerServiceAccount" -}}
{{- default (include "dra-swap.controller" .) .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- define "dra-swap.webhookSecret" -}}
{{- if eq .Values.controller.webhook.tls.mode "secret" -}}
{{- required "controller.webhook.tls.secretName is required with tls.mode secret" .Values.controller.webhook.tls.secretName -}}
{{- else -}}
{{- include "dra-swap.controller" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* Settings that render but would fail at run time fail here, at helm
install, saying what to change (controller.yaml includes this once; it
renders nothing). */}}
{{- define "dra-swap.validate" -}}
{{- $c := .Values.controller -}}
{{- if and (eq $c.podSelection "namespaces") (not (trim ($c.namespaceSelector | default ""))) -}}
{{- fail "controller.podSelection namespaces needs controller.namespaceSelector, a label selector of the namespaces whose pods get labels (e.g. swap-labels=enabled): without one the controller refuses to start" -}}
{{- end -}}
{{- $tls := $c.webhook.tls -}}
{{- if and (eq $tls.mode "secret") (not $tls.caBundle) -}}
{{- fail "controller.webhook.tls.mode secret needs controller.webhook.tls.caBundle, the base64 PEM of the CA that signed the Secret's certificate: without it the API server cannot verify the webhooks, and every claim with SwapConfig is refused" -}}
{{- end -}}
{{- $pdb := $c.podDisruptionBudget -}}
{{- $replicas := int $c.replicas -}}
{{- if and $pdb.enabled (gt $replicas 0) -}}
{{- $min := $pdb.minAvailable -}}
{{- $blocks := false -}}
{{- if and (kindIs "string" $min) (hasSuffix "%" $min) -}}
{{- /* A percentage rounds up: it keeps every replica when p × replicas > 100 × (replicas − 1). */ -}}
{{- $blocks = gt (mul (int (trimSuffix "%" $min)) $replicas) (mul 100 (sub $replicas 1)) -}}
{{- else -}}
{{- $blocks = ge (int $min) $replicas -}}
{{- end -}}
{{- if $blocks -}}
{{- fail (printf "controller.podDisruptionBudget.minAvailable %v with controller.replicas %d lets no controller pod be evicted, so every node drain that reaches one blocks: set controller.replicas above minAvailable (the default is 2 replicas, minAvailable 1), lower minAvailable, or set controller.podDisruptionBudget.enabled=false" $min $replicas) -}}
{{- end -}}
{{- end -}}
{{- $p := .Values.kubeletPlugin.pressure -}}
{{- if not (regexMatch "^(0+(\\.0+)?(ns|us|µs|ms|s|m|h))+$" $p.interval) -}}
{{- range $pair := list (list "someThreshold" "someClear") (list "fullThreshold" "fullClear") (list "swapFullPercent" "swapFullClearPercent") -}}
{{- $set := index $p (first $pair) -}}
{{- $clear := index $p (last $pair) -}}
{{- if ge (float64 $clear) (float64 $set) -}}
{{- fail (printf "kubeletPlugin.pressure.%s %v must be below kubeletPlugin.pressure.%s %v (a taint is set at its threshold and cleared below its clear value): the plugin refuses to start otherwise" (last $pair) $clear (first $pair) $set) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The driver's name: fixed, the DeviceClass selectors and the
admission policy match it. */}}
{{- define "dra-swap.driver" -}}dra.swap{{- end -}}

{{/* The image: pinned by digest when image.digest is set (the tag is then
ignored), else by tag (the chart's appVersion when empty). */}}
{{- define "dra-swap.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Every object's labels, each key once (a dict rendered by toYaml):
helm.sh/chart, app.kubernetes.io/{name,instance,version,managed-by,part-of}
and, given one, app.kubernetes.io/component, over commonLabels and extra
labels (a pod template's podLabels), which cannot replace the chart's. The
version is the chart's appVersion, never the image's tag or digest. Called
with the root context, or with (dict "root" . "component" "..." "extra"
labels). */}}
{{- define "dra-swap.labels" -}}
{{- $root := . -}}
{{- $component := "" -}}
{{- $extra := dict -}}
{{- if hasKey . "root" -}}
{{- $root = .root -}}
{{- $component = get . "component" -}}
{{- $extra = get . "extra" | default dict -}}
{{- end -}}
{{- $labels := merge (dict) (deepCopy $extra) (deepCopy ($root.Values.commonLabels | default dict)) -}}
{{- $_ := set $labels "helm.sh/chart" (printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_") -}}
{{- $_ := set $labels "app.kubernetes.io/name" (include "dra-swap.name" $root) -}}
{{- $_ := set $labels "app.kubernetes.io/instance" $root.Release.Name -}}
{{- $_ := set $labels "app.kubernetes.io/version" ($root.Chart.AppVersion | replace "+" "_" | trunc 63 | trimSuffix "-") -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" $root.Release.Service -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" "dra-driver-swap" -}}
{{- if $component -}}
{{- $_ := set $labels "app.kubernetes.io/component" $component -}}
{{- end -}}
{{- toYaml $labels -}}
{{- end -}}

{{- define "dra-swap.pluginSelector" -}}
app.kubernetes.io/name: {{ include "dra-swap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: kubelet-plugin
{{- end -}}

{{- define "dra-swap.controllerSelector" -}}
app.kubernetes.io/name: {{ include "dra-swap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* The webhooks' match conditions: only objects whose opaque config names
the driver reach the validator (kept identical to internal/controller/webhook). */}}
{{- define "dra-swap.mentionsDriver" -}}
(request.resource.resource == "deviceclasses" && has(object.spec.config) && object.spec.config.exists(c, has(c.opaque) && c.opaque.driver == {{ include "dra-swap.driver" . | quote }})) ||
(request.resource.resource == "resourceclaims" && has(object.spec.devices) && has(object.spec.devices.config) && object.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == {{ include "dra-swap.driver" . | quote }})) ||
(request.resource.resource == "resourceclaimtemplates" && has(object.spec.spec.devices) && has(object.spec.spec.devices.config) && object.spec.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == {{ include "dra-swap.driver" . | quote }}))
{{- end -}}


{{/* A claim that kube-controller-manager's resourceclaim controller
creates from a pod's ResourceClaimTemplate: the template's spec, which the
config webhook reviewed when the template was written, annotated with
resource.kubernetes.io/pod-claim-name. Both the annotation and the
requester are required (the controller's ServiceAccount with
--use-service-account-credentials, else kube-controller-manager's own
user), so a claim anyone else writes with that annotation is still
reviewed. */}}
{{- define "dra-swap.claimFromTemplate" -}}
request.resource.resource == "resourceclaims" && request.operation == "CREATE" &&
request.userInfo.username in ["system:serviceaccount:kube-system:resource-claim-controller", "system:kube-controller-manager"] &&
has(object.metadata.annotations) && "resource.kubernetes.io/pod-claim-name" in object.metadata.annotations
{{- end -}}

{{/* The names of the chart's DeviceClasses, as a JSON list. */}}
{{- define "dra-swap.swapClasses" -}}
{{- $names := list (include "dra-swap.driver" .) -}}
{{- range .Values.deviceClasses.extra }}{{ $names = append $names .name }}{{ end -}}
{{ toJson $names }}
{{- end -}}

{{/* Claims and templates that request one of the chart's classes (kept
identical to internal/controller/webhook). */}}
{{- define "dra-swap.requestsSwapClass" -}}
{{- $l := include "dra-swap.swapClasses" . -}}
(request.resource.resource == "resourceclaims" && has(object.spec.devices) && has(object.spec.devices.requests) && object.spec.devices.requests.exists(r, (has(r.exactly) && r.exactly.deviceClassName in {{ $l }}) || (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName in {{ $l }})))) ||
(request.resource.resource == "resourceclaimtemplates" && has(object.spec.spec.devices) && has(object.spec.spec.devices.requests) && object.spec.spec.devices.requests.exists(r, (has(r.exactly) && r.exactly.deviceClassName in {{ $l }}) || (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName in {{ $l }}))))
{{- end -}}

{{/* A claim status update that reserves a dra.swap claim for a pod it was
not reserved for (kept identical to internal/controller/webhook). */}}
{{- define "dra-swap.newlyReservesSwap" -}}
has(object.status.allocation) && has(object.status.allocation.devices) && has(object.status.allocation.devices.results) &&
object.status.allocation.devices.results.exists(r, r.driver == {{ include "dra-swap.driver" . | quote }}) && has(object.status.reservedFor) &&
object.status.reservedFor.exists(c, c.resource == "pods" && !(has(oldObject.status.reservedFor) && oldObject.status.reservedFor.exists(o, o.uid == c.uid)))
{{- end -}}


{{/* The label keys the controller may set on pods (internal/controller/podlabels:
TopologyKeys and the allowlist), as a CEL list. */}}
{{- define "dra-swap.podLabelKeys" -}}
{{- $keys := list "topology.kubernetes.io/zone" "topology.kubernetes.io/region" "kubernetes.io/hostname" "node.kubernetes.io/swap-behavior" -}}
{{- range .Values.controller.nodeLabelAllowlist }}{{ $keys = append $keys . }}{{ end -}}
{{ toJson $keys }}
{{- end -}}

{{/* The name of `helm test`'s objects (its ServiceAccount, RBAC, claim
template and pod). */}}
{{- define "dra-swap.helmTest" -}}{{ include "dra-swap.fullname" . | trunc 58 | trimSuffix "-" }}-test{{- end -}}
