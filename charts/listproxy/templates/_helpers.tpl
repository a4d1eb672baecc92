{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "listproxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name, used for every object the chart creates. */}}
{{- define "listproxy.fullname" -}}
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

{{- define "listproxy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "listproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "listproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "listproxy.labels" -}}
helm.sh/chart: {{ include "listproxy.chart" . }}
{{ include "listproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "listproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "listproxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "listproxy.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding the continue-token keys file (key "keys"). */}}
{{- define "listproxy.continueTokenKeysSecretName" -}}
{{- default (printf "%s-continue-token-keys" (include "listproxy.fullname" .)) .Values.continueTokenKeys.existingSecret }}
{{- end }}

{{/*
RBAC rules granting list and watch on the cached resources: everything for
"*", else one rule per API group over exactly the listed resources.
Entries are RESOURCE (core group) or RESOURCE.GROUP. Plus get on /metrics,
where listproxy reads the apiserver's watch feature gates.
*/}}
{{- define "listproxy.cacheRules" -}}
{{- $resources := .Values.cache.resources }}
{{- if has "*" $resources }}
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["list", "watch"]
{{- else }}
{{- $byGroup := dict }}
{{- range $resources }}
{{- $parts := splitn "." 2 . }}
{{- $group := default "" $parts._1 }}
{{- $_ := set $byGroup $group (append (get $byGroup $group | default list) $parts._0) }}
{{- end }}
{{- range $group := keys $byGroup | sortAlpha }}
- apiGroups: [{{ $group | quote }}]
  resources: {{ get $byGroup $group | uniq | sortAlpha | toJson }}
  verbs: ["list", "watch"]
{{- end }}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list"]
- apiGroups: ["apiregistration.k8s.io"]
  resources: ["apiservices"]
  verbs: ["list"]
{{- end }}
- nonResourceURLs: ["/metrics"]
  verbs: ["get"]
{{- end }}

{{/*
impersonateOn renders the constrained-impersonation verbs
impersonate-on:user-info:VERB for a list of request verbs, as a JSON list.
*/}}
{{- define "listproxy.impersonateOn" -}}
{{- $verbs := list }}
{{- range . }}
{{- $verbs = append $verbs (printf "impersonate-on:user-info:%s" .) }}
{{- end }}
{{- toJson $verbs }}
{{- end }}

{{/*
maxStoreBytes is --max-store-bytes: cache.maxStoreBytes when set (0: no
bound); otherwise, in service mode, half of resources.limits.memory
(listproxy's RSS is measured at 1.4-1.7x its stores' bytes), and nothing
(no bound) in sidecar mode or without a memory limit.
*/}}
{{- define "listproxy.maxStoreBytes" -}}
{{- $set := .Values.cache.maxStoreBytes }}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) | toString }}
{{- if not (kindIs "invalid" $set) }}
{{- printf "%.0f" (float64 $set) }}
{{- else if and (eq .Values.mode "service") $limit }}
{{- $units := dict "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 }}
{{- $suffix := regexFind "(Ki|Mi|Gi|Ti|k|M|G|T)$" $limit }}
{{- $unit := 1.0 }}
{{- if $suffix }}{{ $unit = get $units $suffix }}{{ end }}
{{- $number := trimSuffix $suffix $limit }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?$" $number) }}
{{- fail (printf "resources.limits.memory %q: want a number with an optional Ki, Mi, Gi, Ti, k, M, G or T suffix, or set cache.maxStoreBytes" $limit) }}
{{- end }}
{{- printf "%.0f" (divf (mulf (float64 $number) $unit) 2) }}
{{- end }}
{{- end }}
