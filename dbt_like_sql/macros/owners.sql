{#- Who pays for a pod: its request's team, else the team owning its namespace. -#}

{#- The teams' namespaces (var team_namespaces: 'team|namespace|cost_center|site' each) as rows
    team, namespace, cost_center, site ('' -> NULL): the body of an `owners` CTE. -#}
{% macro namespace_owners() -%}
select
        split_part(t, '|', 1) as team,
        split_part(t, '|', 2) as namespace,
        nullif(split_part(t, '|', 3), '') as cost_center,
        nullif(split_part(t, '|', 4), '') as site
    from unnest(cast({{ var('team_namespaces') }} as varchar[])) as u(t)
{%- endmacro %}

{#- A pod's owner columns from its request (r, left-joined stg_requests) or its namespace's owner
    (o, left-joined owners): team, cost_center, site, lane ('(namespace)' for a namespace's
    pod), owner_rule ('request' / 'namespace'). `unmounted`: the rows of pod '(unmounted)' (a
    volume's hours no pod mounted) belong to nobody (owner_rule 'unmounted'). Each ends in a comma. -#}
{% macro pod_owner(unmounted=false) -%}
{% if unmounted %}case when p.pod <> '(unmounted)' then {% endif %}coalesce(r.team, o.team)
            {%- if unmounted %} end{% endif %} as team,
        {% if unmounted %}case when p.pod <> '(unmounted)' then {% endif %}coalesce(r.cost_center, o.cost_center, o.team)
            {%- if unmounted %} end{% endif %} as cost_center,
        {% if unmounted %}case when p.pod <> '(unmounted)' then {% endif %}coalesce(r.site, o.site, 'unknown')
            {%- if unmounted %} end{% endif %} as site,
        case {% if unmounted %}when p.pod = '(unmounted)' then null {% endif -%}
            when r.request_id is not null then r.lane when o.team is not null then '(namespace)' end as lane,
        case {% if unmounted %}when p.pod = '(unmounted)' then 'unmounted' {% endif -%}
            when r.request_id is not null then 'request' when o.team is not null then 'namespace' end as owner_rule,
{%- endmacro %}

{#- The body of a `matched` CTE: each billing row (CTE billing) with its best candidate (CTE
    candidates: day, source, source_row, `column`, rule_rank), the lowest rule_rank first, then
    the lowest `column`; the candidate's `column` as `name`. -#}
{% macro best_candidate(column, name) -%}
select b.*, c.{{ column | ident }} as {{ name | ident }}
    from billing as b
    inner join (
        select * from candidates
        qualify row_number() over (partition by day, source, source_row order by rule_rank, {{ column | ident }}) = 1
    ) as c on c.day = b.day and c.source = b.source and c.source_row = b.source_row
{%- endmacro %}
