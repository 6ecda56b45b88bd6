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

{{- define "dra-swap.plugin" -}}{{ include "dra-swap.fullname" . | trunc 50 | trimSuffix "-" }}-kubeletplugin{{- end -}}
{{- define "dra-swap.controller" -}}{{ include "dra-swap.fullname" . | trunc 52 | trimSuffix "-" }}-controller{{- end -}}
{{- define "dra-swap.webhookSecret" -}}
{{- if eq .Values.controller.webhook.tls.mode "secret" -}}
{{- required "controller.webhook.tls.secretName is required with tls.mode secret" .Values.controller.webhook.tls.secretName -}}
{{- else -}}
{{- include "dra-swap.controller" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* The driver's name: fixed, the DeviceClass selectors and the
admission policy match it. */}}
{{- define "dra-swap.driver" -}}dra.swap{{- end -}}

{{- define "dra-swap.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "dra-swap.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: dra-driver-swap
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
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
the driver reach the validator (kept identical to pkg/webhook). */}}
{{- define "dra-swap.mentionsDriver" -}}
(request.resource.resource == "deviceclasses" && has(object.spec.config) && object.spec.config.exists(c, has(c.opaque) && c.opaque.driver == "dra.swap")) ||
(request.resource.resource == "resourceclaims" && has(object.spec.devices) && has(object.spec.devices.config) && object.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == "dra.swap")) ||
(request.resource.resource == "resourceclaimtemplates" && has(object.spec.spec.devices) && has(object.spec.spec.devices.config) && object.spec.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == "dra.swap"))
{{- end -}}
