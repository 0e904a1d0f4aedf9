{{/* Name of a service's objects: <release>-<service>. Takes dict root, service. */}}
{{- define "nova.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .service | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object of a service. */}}
{{- define "nova.labels" -}}
{{ include "nova.selectorLabels" . }}
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

{{/* Labels of release-wide objects (Secrets, ServiceAccount). Takes the root. */}}
{{- define "nova.commonLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: nova
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "nova.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if contains "nova" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-nova" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The bundled NATS chart's full name, as its nats.fullname computes it. */}}
{{- define "nova.natsFullname" -}}
{{- $n := .Values.nats -}}
{{- if $n.fullnameOverride -}}
{{- $n.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := $n.nameOverride | default "nats" -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nova.natsURL" -}}
{{- if .Values.nats.enabled -}}
{{- $scheme := "nats" -}}
{{- if .Values.natsAuth.tls.enabled }}{{ $scheme = "tls" }}{{ end -}}
{{- printf "%s://%s:4222" $scheme (include "nova.natsFullname" .) -}}
{{- else -}}
{{- .Values.externalNats.url -}}
{{- end -}}
{{- end -}}

{{/* The bundled NATS chart's headless service, the StatefulSet's serviceName:
its headlessService.name, else <nats.fullname>-headless. */}}
{{- define "nova.natsHeadlessService" -}}
{{- $h := .Values.nats.headlessService | default dict -}}
{{- $h.name | default (printf "%s-headless" (include "nova.natsFullname" .)) -}}
{{- end -}}

{{/* host:port of the NATS monitoring endpoint for KEDA, reachable from KEDA's
namespace. For the bundled cluster it is the headless service: KEDA finds
the server leading the consumer and reads from <pod>.<endpoint host>, which
Kubernetes names only under the StatefulSet's headless service. */}}
{{- define "nova.natsMonitoringEndpoint" -}}
{{- if .Values.nats.enabled -}}
{{- printf "%s.%s.svc.cluster.local:8222" (include "nova.natsHeadlessService" .) .Release.Namespace -}}
{{- else if .Values.externalNats.monitoringEndpoint -}}
{{- .Values.externalNats.monitoringEndpoint -}}
{{- else -}}
{{- $host := (urlParse .Values.externalNats.url).hostname -}}
{{- if not (contains "." $host) }}{{ $host = printf "%s.%s.svc.cluster.local" $host .Release.Namespace }}{{ end -}}
{{- printf "%s:8222" $host -}}
{{- end -}}
{{- end -}}

{{/* Every NATS user of accounts.conf: the services, producers, operators. */}}
{{- define "nova.natsUsers" -}}
{{- list "graph-engine" "sandbox" "audit" "input-analyzer" "code-generator" "code-validator" "output-validator" "gateway" "nova" "admin" "sys" | toJson -}}
{{- end -}}

{{- define "nova.natsUsersSecret" -}}
{{- .Values.natsAuth.existingSecret | default (printf "%s-nats-users" .Release.Name) -}}
{{- end -}}

{{- define "nova.mongodbSecret" -}}
{{- .Values.mongodb.existingSecret | default (printf "%s-mongodb" .Release.Name) -}}
{{- end -}}

{{- define "nova.mongodbSecretKey" -}}
{{- if .Values.mongodb.existingSecret }}{{ .Values.mongodb.existingSecretKey }}{{ else }}uri{{ end -}}
{{- end -}}

{{/* The Secret holding OPENAI_API_KEY; empty when there is none. */}}
{{- define "nova.llmSecret" -}}
{{- if .Values.llm.existingSecret -}}
{{- .Values.llm.existingSecret -}}
{{- else if .Values.llm.apiKey -}}
{{- printf "%s-llm" .Release.Name -}}
{{- end -}}
{{- end -}}

{{- define "nova.llmSecretKey" -}}
{{- if .Values.llm.existingSecret }}{{ .Values.llm.existingSecretKey }}{{ else }}OPENAI_API_KEY{{ end -}}
{{- end -}}

{{/* Whether KEDA scales the queue consumers: keda.enabled, and the
cluster serves KEDA's ScaledObject API (helm template: --api-versions
keda.sh/v1alpha1/ScaledObject). "true" or "". */}}
{{- define "nova.keda" -}}
{{- if and .Values.keda.enabled (.Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject") }}true{{ end -}}
{{- end -}}

{{/* Whether KEDA or an HPA sets a service's replicas. Takes dict root, cfg.
With keda.enabled on a cluster without KEDA, nothing does: the Deployment
keeps its replicas (NOTES.txt says so). */}}
{{- define "nova.autoscaled" -}}
{{- $a := .cfg.autoscaling | default dict -}}
{{- if and $a.enabled (or (not .root.Values.keda.enabled) (and (include "nova.keda" .root) $a.triggers)) }}true{{ end -}}
{{- end -}}

{{/* A service's environment (its ConfigMap's data). Takes dict root, service, cfg. */}}
{{- define "nova.env" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $env := dict -}}
{{- range $k, $val := $v.env }}{{ $_ := set $env $k (toString $val) }}{{ end -}}
{{- $_ := set $env "NATS_URL" (include "nova.natsURL" $root) -}}
{{- $_ := set $env "NATS_INBOX_PREFIX" (printf "_INBOX.%s" .service) -}}
{{- $_ := set $env "HEALTH_ADDR" ":8080" -}}
{{- with $v.otel.endpoint }}{{ $_ := set $env "OTEL_EXPORTER_OTLP_ENDPOINT" . }}{{ end -}}
{{- if eq $v.natsAuth.mode "password" }}{{ $_ := set $env "NATS_USER" .service }}{{ end -}}
{{- if eq $v.natsAuth.mode "creds" }}{{ $_ := set $env "NATS_CREDS" "/etc/nova/nats/nats.creds" }}{{ end -}}
{{- if eq $v.natsAuth.mode "nkey" }}{{ $_ := set $env "NATS_NKEY_SEED_FILE" "/etc/nova/nats/nats.nk" }}{{ end -}}
{{- if $v.natsAuth.tls.enabled -}}
{{- $_ := set $env "NATS_TLS_CA" "/etc/nova/nats-tls/ca.crt" -}}
{{- if $v.natsAuth.tls.clientCert -}}
{{- $_ := set $env "NATS_TLS_CERT" "/etc/nova/nats-tls/tls.crt" -}}
{{- $_ := set $env "NATS_TLS_KEY" "/etc/nova/nats-tls/tls.key" -}}
{{- end -}}
{{- end -}}
{{- if .cfg.mongodb }}{{ $_ := set $env "MONGODB_DATABASE" $v.mongodb.database }}{{ end -}}
{{- if .cfg.apiKeys }}{{ $_ := set $env "NOVA_GATEWAY_KEYS_FILE" "/etc/nova/gateway/keys.yaml" }}{{ end -}}
{{- if and (eq (toString (index (.cfg.env | default dict) "NOVA_CODECACHE_SEMANTIC")) "true") (not .cfg.llm) -}}
{{- fail (printf "services.%s: NOVA_CODECACHE_SEMANTIC needs llm: true (the engine calls the LLM API's embeddings: OPENAI_API_KEY and egress to it)" .service) -}}
{{- end -}}
{{- if .cfg.llm -}}
{{- with $v.llm.baseURL }}{{ $_ := set $env "OPENAI_BASE_URL" . }}{{ end -}}
{{- with $v.llm.apiVersion }}{{ $_ := set $env "OPENAI_API_VERSION" . }}{{ end -}}
{{- with $v.llm.prices }}{{ $_ := set $env "NOVA_LLM_PRICES" . }}{{ end -}}
{{- end -}}
{{- range $k, $val := .cfg.env }}{{ $_ := set $env $k (toString $val) }}{{ end -}}
{{- toYaml $env -}}
{{- end -}}

{{/* A service's image: <registry>/<service>:<tag>, @<digest> when pinned.
Takes dict root, service. */}}
{{- define "nova.image" -}}
{{- $img := .root.Values.image -}}
{{- $ref := printf "%s/%s:%s" $img.registry .service ($img.tag | default .root.Chart.AppVersion) -}}
{{- with get ($img.digests | default dict) .service -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "image.digests: %q is not a digest (sha256: and 64 hex digits)" .) -}}
{{- end -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* The /readyz URL of every enabled service's Service, space-separated
(helm test). */}}
{{- define "nova.readyzURLs" -}}
{{- $urls := list -}}
{{- range $service, $cfg := .Values.services -}}
{{- if $cfg.enabled -}}
{{- $urls = append $urls (printf "http://%s:8080/readyz" (include "nova.fullname" (dict "root" $ "service" $service))) -}}
{{- end -}}
{{- end -}}
{{- join " " $urls -}}
{{- end -}}
