{{/* Names and labels shared by every template. */}}

{{- define "corral.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "corral.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; "component" names the process (api, worker-provision, ...). */}}
{{- define "corral.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "corral.selectorLabels" . }}
{{- end -}}

{{- define "corral.selectorLabels" -}}
app.kubernetes.io/name: {{ include "corral.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "corral.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "corral.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "corral.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The chart's own Secret: the API token, Flower's login, the bundled Redis's password. */}}
{{- define "corral.secretName" -}}
{{ include "corral.fullname" . }}-secrets
{{- end -}}

{{/* A value of the chart's Secret, base64: the one given in the values, else one derived from
     secrets.seed, the release's name and the key. The render is a pure function of the values:
     `helm template` run by ArgoCD or Flux on every sync gives the same Secret each time (no
     `lookup`, no random draw). Hex, so it is safe inside a Redis URL. */}}
{{- define "corral.secretValue" -}}
{{- if .given -}}
{{- .given | b64enc -}}
{{- else -}}
{{- $seed := required (printf "secrets.seed is required to derive %s: set it (e.g. `openssl rand -hex 32`, kept like any secret), or give the value, or an existingSecret (see the chart's README)" .key) .root.Values.secrets.seed -}}
{{- printf "corral/%s/%s/%s" $seed .root.Release.Name .key | sha256sum | b64enc -}}
{{- end -}}
{{- end -}}

{{/* The keys the chart's own Secret holds (empty when every secret is an existing one). */}}
{{- define "corral.ownSecretKeys" -}}
{{- if not .Values.apiToken.existingSecret }} api-token{{ end -}}
{{- if and .Values.flower.enabled (not .Values.flower.existingSecret) }} flower-password basic-auth{{ end -}}
{{- if and .Values.redis.enabled .Values.redis.auth.enabled (not .Values.redis.auth.existingSecret) }} redis-password{{ end -}}
{{- if and .Values.metrics.token.enabled (not .Values.metrics.token.existingSecret) }} metrics-token{{ end -}}
{{- end -}}

{{/* Redis: host, port, database, TLS, and where its password is (if it has one). */}}
{{- define "corral.redisHost" -}}
{{- if .Values.redis.enabled -}}{{ include "corral.fullname" . }}-redis{{- else -}}{{ required "externalRedis.host is required when redis.enabled is false" .Values.externalRedis.host }}{{- end -}}
{{- end -}}

{{- define "corral.redisPort" -}}
{{- if .Values.redis.enabled -}}6379{{- else -}}{{ .Values.externalRedis.port }}{{- end -}}
{{- end -}}

{{- define "corral.redisDb" -}}
{{- if .Values.redis.enabled -}}0{{- else -}}{{ .Values.externalRedis.db }}{{- end -}}
{{- end -}}

{{- define "corral.redisTls" -}}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.tls -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{- define "corral.redisPasswordSecret" -}}
{{- if .Values.redis.enabled -}}
{{- if .Values.redis.auth.enabled -}}{{ .Values.redis.auth.existingSecret | default (include "corral.secretName" .) }}{{- end -}}
{{- else -}}
{{- .Values.externalRedis.passwordSecret.name -}}
{{- end -}}
{{- end -}}

{{- define "corral.redisPasswordKey" -}}
{{- if .Values.redis.enabled -}}{{ ternary .Values.redis.auth.existingSecretKey "redis-password" (ne .Values.redis.auth.existingSecret "") }}{{- else -}}{{ .Values.externalRedis.passwordSecret.key }}{{- end -}}
{{- end -}}

{{/* The environment of every Corral container. CORRAL_REDIS_URL takes the password from
     REDIS_PASSWORD by Kubernetes' $(VAR) expansion: it is never written into the pod spec. */}}
{{- define "corral.env" -}}
- name: CORRAL_HOME
  value: /var/lib/corral
- name: CORRAL_CLOUDS
  value: {{ .Values.clouds | toJson | quote }}
- name: CORRAL_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- with include "corral.nodeApiUrl" . }}
- name: CORRAL_NODE_API_URL
  value: {{ . | quote }}
{{- end }}
{{- $scheme := ternary "rediss" "redis" (eq (include "corral.redisTls" .) "true") }}
{{- $where := printf "%s:%s/%s" (include "corral.redisHost" .) (include "corral.redisPort" .) (include "corral.redisDb" .) }}
{{- if include "corral.redisPasswordSecret" . }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "corral.redisPasswordSecret" . }}
      key: {{ include "corral.redisPasswordKey" . }}
- name: CORRAL_REDIS_URL
  value: {{ printf "%s://:$(REDIS_PASSWORD)@%s" $scheme $where | quote }}
{{- else }}
- name: CORRAL_REDIS_URL
  value: {{ printf "%s://%s" $scheme $where | quote }}
{{- end }}
{{- with .Values.bundles.store }}
- name: CORRAL_BUNDLE_STORE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Writable places under a read-only root file system. */}}
{{- define "corral.volumes" -}}
- name: home
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- with .Values.bundles.existingClaim }}
- name: bundles
  persistentVolumeClaim:
    claimName: {{ . }}
{{- end }}
{{- end -}}

{{- define "corral.volumeMounts" -}}
- name: home
  mountPath: /var/lib/corral
- name: tmp
  mountPath: /tmp
{{- if .Values.bundles.existingClaim }}
- name: bundles
  mountPath: /var/lib/corral/bundles
{{- end }}
{{- end -}}

{{/* The pod settings every Corral process shares. */}}
{{- define "corral.podCommon" -}}
serviceAccountName: {{ include "corral.serviceAccountName" . }}
# Corral never calls the Kubernetes API: no token in its pods, whichever service account.
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}


{{/* The API's address as cloud machines reach it: nodeApiUrl, else the Ingress's host. */}}
{{- define "corral.nodeApiUrl" -}}
{{- if .Values.nodeApiUrl -}}
{{- .Values.nodeApiUrl -}}
{{- else if .Values.api.ingress.enabled -}}
{{- printf "%s://%s" (ternary "https" "http" .Values.api.ingress.tls.enabled) .Values.api.ingress.host -}}
{{- end -}}
{{- end -}}

{{/* Spread a component's pods over zones and nodes (soft by default: a one-node cluster still
     schedules them). Call with (dict "root" $ "component" "api"). */}}
{{- define "corral.topologySpread" -}}
{{- if .root.Values.topologySpread.enabled }}
topologySpreadConstraints:
{{- range .root.Values.topologySpread.topologyKeys }}
  - maxSkew: {{ $.root.Values.topologySpread.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: {{ $.root.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "corral.selectorLabels" $ | nindent 8 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget for a component. Call with (dict "root" $ "component" "api"). */}}
{{- define "corral.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "corral.fullname" .root }}-{{ .component }}
  labels:
    {{- include "corral.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "corral.selectorLabels" . | nindent 6 }}
{{- end -}}
