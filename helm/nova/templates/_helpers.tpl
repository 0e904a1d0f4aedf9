{{/* Name of a service's objects: <release>-<service>. */}}
{{- define "nova.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .service | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object of a service. */}}
{{- define "nova.labels" -}}
app.kubernetes.io/name: {{ .service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: nova
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/* Labels that select a service's pods. */}}
{{- define "nova.selectorLabels" -}}
app.kubernetes.io/name: {{ .service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}
