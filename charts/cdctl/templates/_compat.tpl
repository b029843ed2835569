{{/*
The Go chart's value names (NVIDIA's dra-driver-nvidia-gpu, docs/upgrade-from-nvidia.md), read where they map
onto this chart's own values. Those names are not in values.yaml (its keys are this chart's); the schema
accepts them and documents each, templates/upstream-compat.yaml refuses those that do not map, and this
helper gives the effective settings: the Go chart's name when it is set, else this chart's value. Call as
  {{- $c := include "cdctl.compat" . | fromYaml }}
*/}}
{{- define "cdctl.compat" -}}
{{- $plugin := .Values.kubeletPlugin -}}
{{- $controller := .Values.controller -}}
{{- $pluginMetrics := index $plugin "metrics" | default dict -}}
{{- $controllerMetrics := index $controller "metrics" | default dict -}}
{{- $cdContainer := dig "containers" "computeDomains" dict $plugin -}}
{{- $ctrlContainer := dig "containers" "computeDomain" dict $controller -}}
{{- $serviceAccount := index .Values "serviceAccount" | default dict -}}
procDevicesPath: {{ index .Values "altProcDevices" | default .Values.procDevicesPath | quote }}
kubeletRegistrarDirectoryPath: {{ index $plugin "kubeletRegistrarDirectoryPath" | default .Values.kubeletRegistrarDirectoryPath | quote }}
kubeletPluginsDirectoryPath: {{ index $plugin "kubeletPluginsDirectoryPath" | default .Values.kubeletPluginsDirectoryPath | quote }}
resourceApiVersion: {{ .Values.resourceApiVersion | trimPrefix "resource.k8s.io/" | quote }}
controllerHttpPort: {{ include "cdctl.endpointPort" (dict "endpoint" (index $controllerMetrics "httpEndpoint") "port" $controller.httpPort) }}
controllerMetricsPath: {{ index $controllerMetrics "metricsPath" | default $controller.metricsPath | quote }}
controllerPprofPath: {{ index $controllerMetrics "profilePath" | default "" | quote }}
controllerEnv: {{ concat $controller.env (index $ctrlContainer "env" | default list) | toJson }}
controllerResources: {{ index $ctrlContainer "resources" | default $controller.resources | toJson }}
controllerPodAnnotations: {{ $controller.podAnnotations | toJson }}
pluginHttpPort: {{ include "cdctl.endpointPort" (dict "endpoint" (index $pluginMetrics "computeDomainHttpEndpoint") "port" $plugin.httpPort) }}
pluginMetricsPath: {{ index $pluginMetrics "metricsPath" | default $plugin.metricsPath | quote }}
pluginEnv: {{ concat $plugin.env (index $cdContainer "env" | default list) | toJson }}
pluginResources: {{ index $cdContainer "resources" | default $plugin.resources | toJson }}
pluginPodAnnotations: {{ $plugin.podAnnotations | toJson }}
healthcheckPort: {{ hasKey $cdContainer "healthcheckPort" | ternary (index $cdContainer "healthcheckPort") $plugin.healthcheckPort }}
gpuCliqueLabelEnabled: {{ hasKey $cdContainer "gpuCliqueLabelEnabled" | ternary (index $cdContainer "gpuCliqueLabelEnabled") $plugin.gpuCliqueLabelEnabled }}
privileged: {{ dig "securityContext" "privileged" $plugin.privileged $cdContainer }}
serviceAccountAnnotations: {{ index $serviceAccount "annotations" | default dict | toJson }}
{{- end -}}

{{/* The port of a Go-style HTTP endpoint (":8080", "0.0.0.0:8080"), else `port`. */}}
{{- define "cdctl.endpointPort" -}}
{{- if .endpoint -}}
{{- regexFind "[0-9]+$" .endpoint | int -}}
{{- else -}}
{{- .port | int -}}
{{- end -}}
{{- end -}}

{{/*
"true" when IMEX is host-managed, spelled either way: featureGates.HostManagedIMEX, or the Go chart's
resources.computeDomains.imex.mode hostManaged (which it unlocks with featureGates.HostManagedIMEXDaemon).
templates/upstream-compat.yaml refuses the two spellings disagreeing, as the components do.
*/}}
{{- define "cdctl.hostManagedMode" -}}
{{- $mode := .Values.resources.computeDomains.imex.mode -}}
{{- if $mode -}}
{{- ternary "true" "false" (eq $mode "hostManaged") -}}
{{- else -}}
{{- ternary "true" "false" (eq (toString (index .Values.featureGates "HostManagedIMEX" | default false)) "true") -}}
{{- end -}}
{{- end -}}
