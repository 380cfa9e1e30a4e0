{{/* Ferry's image, repository:tag. */}}
{{- define "ferry.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* A sidecar's image: (list $ "provisioner"). */}}
{{- define "ferry.sidecar" -}}
{{- $root := index . 0 -}}
{{- $s := index $root.Values.sidecars (index . 1) -}}
{{ $root.Values.sidecars.registry }}/{{ $s.name }}:{{ $s.tag }}
{{- end -}}
