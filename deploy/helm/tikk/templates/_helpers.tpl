{{/* The chart's name, and the release's full name (at most 63 characters, a DNS label). */}}
{{- define "tikk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tikk.fullname" -}}
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

{{- define "tikk.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tikk.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tikk.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tikk.labels" -}}
helm.sh/chart: {{ include "tikk.chart" . }}
{{ include "tikk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of one component: (dict "root" $ "component" "server"). */}}
{{- define "tikk.componentLabels" -}}
{{ include "tikk.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tikk.componentSelector" -}}
{{ include "tikk.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tikk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tikk.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tikk.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "tikk.serverName" -}}
{{- printf "%s-server" (include "tikk.fullname" .) }}
{{- end }}

{{/* The Secrets: the one given, or the chart's. */}}
{{- define "tikk.backendsSecret" -}}
{{- default (printf "%s-backends" (include "tikk.fullname" .)) .Values.secrets.backends.existingSecret }}
{{- end }}

{{- define "tikk.workerSecret" -}}
{{- default (printf "%s-worker" (include "tikk.fullname" .)) .Values.secrets.worker.existingSecret }}
{{- end }}

{{- define "tikk.scrapeSecret" -}}
{{- default (printf "%s-scrape" (include "tikk.fullname" .)) .Values.secrets.scrape.existingSecret }}
{{- end }}

{{- define "tikk.tlsSecret" -}}
{{- default (printf "%s-tls" (include "tikk.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{/*
The backend URLs: each names its user and the file of its password (mounted from a Secret at
/etc/tikk/secrets), never a password.
*/}}
{{- define "tikk.backendTls" -}}
{{- if .Values.backends.tls.enabled }}
{{- if .Values.backends.tls.customCA }}&tls_ca=/etc/tikk/secrets/backend-ca.pem{{ else }}&tls=1{{ end }}
{{- end }}
{{- end }}

{{- define "tikk.storeUrl" -}}
{{- with .Values.backends.cassandra -}}
cassandra://{{ .user }}@{{ .hosts }}/{{ .keyspace }}?password_file=/etc/tikk/secrets/cassandra-password
{{- end }}
{{- include "tikk.backendTls" . }}
{{- with .Values.backends.cassandra.options }}&{{ . }}{{ end }}
{{- end }}

{{/* The queue URL with the login of (dict "root" $ "user" USER). */}}
{{- define "tikk.queueUrl" -}}
{{- with .root.Values.backends.kafka -}}
kafka://{{ $.user }}@{{ .bootstrap }}?partitions={{ .partitions }}&replication={{ .replication }}&sasl={{ .sasl }}&password_file=/etc/tikk/secrets/kafka-password
{{- with .minInsync }}&min_insync={{ . }}{{ end }}
{{- end }}
{{- include "tikk.backendTls" .root }}
{{- end }}

{{- define "tikk.ownershipUrl" -}}
{{- with .Values.backends.zookeeper -}}
zk://{{ .user }}@{{ .hosts }}{{ .chroot }}?password_file=/etc/tikk/secrets/zookeeper-password
{{- end }}
{{- end }}

{{/* The volumes every tikk pod has: a writable /tmp and data dir on a read-only root. */}}
{{- define "tikk.scratchVolumes" -}}
- name: tmp
  emptyDir: {}
- name: data
  emptyDir: {}
{{- end }}

{{- define "tikk.scratchMounts" -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /var/lib/tikk
{{- end }}

{{/*
The affinity of a component's pods, (dict "root" $ "component" "server"): its `affinity`
value as given, else with `antiAffinity` "soft" or "hard" its pods kept off one another's
nodes (preferred, or required), so that one node's loss takes at most one of them.
*/}}
{{- define "tikk.affinity" -}}
{{- $values := index .root.Values .component }}
{{- if $values.affinity }}
affinity:
  {{- toYaml $values.affinity | nindent 2 }}
{{- else if eq (default "" $values.antiAffinity) "hard" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "tikk.componentSelector" . | nindent 12 }}
{{- else if eq (default "" $values.antiAffinity) "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "tikk.componentSelector" . | nindent 14 }}
{{- end }}
{{- end }}
