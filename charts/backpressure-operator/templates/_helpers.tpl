{{/* The chart's name, or nameOverride. */}}
{{- define "backpressure-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name when it already holds the
chart name, else <release>-<chart>; fullnameOverride replaces it.
*/}}
{{- define "backpressure-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels of every object. */}}
{{- define "backpressure-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "backpressure-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select the manager's pods. */}}
{{- define "backpressure-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "backpressure-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/* The manager's ServiceAccount. */}}
{{- define "backpressure-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "backpressure-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The manager's image. */}}
{{- define "backpressure-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The name of the metrics port: https when secure. */}}
{{- define "backpressure-operator.metricsPortName" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end }}
{{- end }}

{{/* The Secret holding the metrics certificate, or "" when there is none. */}}
{{- define "backpressure-operator.metricsCertSecret" -}}
{{- if .Values.metrics.certSecret }}
{{- .Values.metrics.certSecret }}
{{- else if .Values.metrics.certManager.enabled }}
{{- include "backpressure-operator.fullname" . }}-metrics-cert
{{- end }}
{{- end }}

{{/* The metrics Service's DNS name, which its certificate is for. */}}
{{- define "backpressure-operator.metricsServiceHost" -}}
{{- include "backpressure-operator.fullname" . }}-metrics.{{ .Release.Namespace }}.svc
{{- end }}
