{#- Unit-cost marts: each request of one workload with its lifetime cost, and the released
    artefacts with the cost of their lineage. Arguments are the model author's literals. -#}

{#- The CTE `cost`: each request's lifetime cost (int_request_cost). -#}
{% macro request_cost() -%}
cost as (

    select * from {{ ref('int_request_cost') }}

)
{%- endmacro %}

{#- A request's identity (request_id, team, cost_center) and `keys` (more of its columns) from
    the table `alias`, each followed by a comma. -#}
{% macro request_identity(alias, keys) -%}
{{ alias | ident }}.request_id,
        {{ alias | ident }}.team,
        {{ alias | ident }}.cost_center,
        {%- for key in keys %}
        {{ alias | ident }}.{{ key | ident }},
        {%- endfor %}
{%- endmacro %}

{#- `with requests, cost, final ... select * from final`: every request of `workload` joined to its
    lifetime cost (int_request_cost), with the request's identity, `keys` (request columns named
    by the model), the cost's span and `measures` (request columns after it); the caller's block
    adds the model's own columns. -#}
{% macro request_unit_cost(workload, keys, measures=[]) -%}
with requests as (

    select * from {{ ref('stg_requests') }}
    where workload = {{ workload | literal }}

),

{{ request_cost() }},

final as (

    select
        {{ request_identity('r', keys) }}
        r.state,
        c.currency,
        c.first_day,
        c.last_day,
        c.attempts,
        {%- for measure in measures %}
        r.{{ measure | ident }},
        {%- endfor %}
        {{ caller() | trim }}
    from requests as r
    inner join cost as c on c.request_id = r.request_id

)

select * from final
{%- endmacro %}

{#- The cost (`c.cost`) per unit of `measure` (a column), to 6 decimals; NULL when there is no unit. -#}
{% macro cost_per(measure) -%}
cast(round(cast(c.cost as double) / nullif({{ measure | ident }}, 0), 6) as decimal(18, 6))
{%- endmacro %}

{#- `c.cost`, the cost per unit of `measure` (a column of r) as `cost_column`, and `reason`: why
    there is none (NULL when there is one): the measure not recorded for a failed or rejected
    `request`, not recorded yet, not recorded at all (`missing_finished`), or zero (`zero`). -#}
{% macro cost_per_unit(measure, cost_column, request, missing, unit, missing_finished, zero) -%}
c.cost,
        {{ cost_per('r.' ~ measure) }} as {{ cost_column | ident }},
        -- why there is no cost per unit (NULL when there is one)
        case
            when r.{{ measure | ident }} is null and r.state in ('failed', 'rejected')
                then {{ (request ~ ' ') | literal }} || r.state || {{ (': ' ~ missing ~ ', its cost buys no ' ~ unit) | literal }}
            when r.{{ measure | ident }} is null and r.state <> 'finished'
                then {{ (request ~ ' ') | literal }} || r.state || {{ (': ' ~ missing ~ ' yet') | literal }}
            when r.{{ measure | ident }} is null then {{ missing_finished | literal }}
            when r.{{ measure | ident }} = 0 then {{ zero | literal }}
        end as reason
{%- endmacro %}

{#- `with ... select * from final` for a released artefact (`workload`, finished): the cost of
    every request of its recorded lineage tree, each once. A release without recorded lineage
    falls back to itself plus the requests the caller's join condition matches (r: a request,
    rel: the release). `keys`: the release's columns after its cost center; `cost_column`: the
    name of the summed cost. -#}
{% macro released_lineage_cost(workload, keys, cost_column) -%}
with requests as (

    select * from {{ ref('stg_requests') }}

),

released as (

    select * from requests
    where workload = {{ workload | literal }} and state = 'finished'

),

tree as (

    select * from {{ ref('int_request_lineage') }}

),

recorded as (

    select rel.request_id as released_request_id, t.ancestor_request_id as request_id, 'lineage' as lineage_source
    from released as rel
    inner join tree as t on t.request_id = rel.request_id
    where rel.request_id in (select request_id from tree where depth > 0)

),

shared_ids as (

    select distinct rel.request_id as released_request_id, r.request_id, 'shared_ids' as lineage_source
    from released as rel
    inner join requests as r
        on r.request_id = rel.request_id
        or {{ caller() | trim }}
    where rel.request_id not in (select request_id from tree where depth > 0)

),

lineage as (

    select * from recorded
    union all
    select * from shared_ids

),

{{ request_cost() }},

final as (

    select
        {{ request_identity('rel', keys) }}
        c.currency,
        min(l.lineage_source) as lineage_source,
        count(distinct l.request_id) as lineage_requests,
        sum(c.allocated_gpu_hours) as allocated_gpu_hours,
        sum(c.cost) as {{ cost_column | ident }}
    from released as rel
    inner join lineage as l on l.released_request_id = rel.request_id
    inner join cost as c on c.request_id = l.request_id
    group by all

)

select * from final
{%- endmacro %}
