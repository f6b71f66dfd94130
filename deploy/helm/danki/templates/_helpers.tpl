{{/* The labels every object of the chart carries. */}}
{{- define "danki.labels" -}}
app.kubernetes.io/name: danki
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The gate's Service DNS name: the webhook certificate's host. */}}
{{- define "danki.gateHost" -}}
danki-gate.{{ .Release.Namespace }}.svc
{{- end }}

{{/* The Prometheus Operator objects' labels: the chart's and monitoring.labels. */}}
{{- define "danki.monitoringLabels" -}}
{{ include "danki.labels" . }}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}
