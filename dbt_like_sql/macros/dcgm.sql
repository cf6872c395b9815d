{#- DCGM samples: which raw samples count, and the key a GPU's samples are summed by. -#}

{#- The rows of raw_dcgm_samples (or its hourly rollup's twin) that count for the days built: in
    [day_from, day_to + 1 day), of `metrics`, with a value (NULL, NaN, negative and the blank
    sentinels near 2^63 are not data). A `where` clause's condition. -#}
{% macro dcgm_sample_filter(metrics) -%}
ts >= {{ var('day_from') }}::timestamp
      and ts < {{ var('day_to') }}::timestamp + interval 1 day
      and metric in ({{ metrics | literal }})
      -- values near 2^63 are DCGM blank sentinels, not data
      and value is not null and not isnan(value) and value >= 0 and value < 1e15
{%- endmacro %}

{#- A sample's GPU key, normalised: its UTC day (of `time_column`), lower-case host, GPU, MIG
    instance ('' = the whole GPU, so the key never holds a NULL), namespace and pod ('' -> NULL). -#}
{% macro dcgm_key(time_column) -%}
cast({{ time_column | ident }} as date) as day,
        lower(hostname) as hostname,
        gpu,
        coalesce(gpu_instance_id, '') as gpu_instance_id,
        nullif(namespace, '') as namespace,
        nullif(pod, '') as pod
{%- endmacro %}

{#- The columns busy samples are summed by (int_gpu_busy's grain), of the table `alias` ('' none). -#}
{% macro busy_key(alias='') -%}
{%- set prefix = (alias ~ '.') if alias else '' -%}
{%- for column in ['day', 'hostname', 'gpu', 'gpu_instance_id', 'namespace', 'pod', 'metric'] -%}
{{ (prefix ~ column) | ident }}{% if not loop.last %}, {% endif %}
{%- endfor %}
{%- endmacro %}

{#- Of the samples of `alias` on node-days fed by more than one source (the CTE multi_source: day,
    hostname), one per GPU, MIG instance, pod, metric and timestamp: the first by (source,
    source_line). The end of a `from` clause. -#}
{% macro first_of_multi_source(alias) -%}
{%- set a = alias | ident -%}
semi join multi_source as g
            on g.day = {{ a }}.day and g.hostname = {{ a }}.hostname
        qualify row_number() over (
            partition by {{ a }}.hostname, {{ a }}.gpu, {{ a }}.gpu_instance_id, {{ a }}.namespace, {{ a }}.pod, {{ a }}.metric, {{ a }}.ts
            order by {{ a }}.source, {{ a }}.source_line
        ) = 1
{%- endmacro %}
