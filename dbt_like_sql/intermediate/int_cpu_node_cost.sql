-- The billed cost of CPU nodes (inventory nodes without GPUs) allocated to the pods that ran on them,
-- by their CPU and memory requests over time (OpenCost's rule): the node's day cost is split between
-- its cores and its memory in the ratio of the weights cpu_core_hour_weight : memory_gib_hour_weight
-- (per core-hour, per GiB-hour), each part priced per unit-hour of the node's capacity over its billed
-- hours, and a pod pays requested units x hours. A pod of a known request belongs to the request's
-- team and lane; another pod to the team owning its namespace (lane '(namespace)'); else to nobody,
-- and what nobody requested (the node's idle part) stays shared cost.
with nodes as (

    -- CPU nodes of the inventory (stg_nodes' snapshot rule), with their capacity
    select day, node as hostname, provider_key, alt_provider_key, cpu_capacity,
           memory_capacity / 1073741824.0 as memory_gib
    from {{ ref('stg_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}
      and not has_gpus and cpu_capacity > 0 and memory_capacity > 0

),

billing as (

    select * from {{ ref('int_billing_classes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and billing_class = 'shared'

),

candidates as (

    -- the rules of int_billing_nodes: provider identity, then ResourceId, then ResourceName = node name
    select b.day, b.source, b.source_row, n.hostname, 1 as rule_rank
    from billing as b
    inner join nodes as n on n.day = b.day and b.resource_key is not null
        and (n.provider_key = b.resource_key or n.alt_provider_key = b.resource_key)
    union all
    select b.day, b.source, b.source_row, n.hostname, 2
    from billing as b inner join nodes as n on n.day = b.day and n.hostname = b.resource_id
    union all
    select b.day, b.source, b.source_row, n.hostname, 3
    from billing as b inner join nodes as n on n.day = b.day and n.hostname = lower(b.resource_name)

),

matched as (

    {{ best_candidate('hostname', 'node') }}

),

node_cost as (

    -- billed hours: from the first to the last billed moment of the day (a gap is counted)
    select
        m.day,
        m.node as hostname,
        m.currency,
        sum(m.effective_cost) as node_cost,
        min(m.day_period_start) as billed_from,
        max(m.day_period_end) as billed_to,
        any_value(n.cpu_capacity) as cpu_capacity,
        any_value(n.memory_gib) as memory_gib
    from matched as m
    inner join nodes as n on n.day = m.day and n.hostname = m.node
    group by m.day, m.node, m.currency

),

rates as (

    select
        *,
        epoch(billed_to - billed_from) / 3600.0 as node_hours,
        cpu_capacity * cast({{ var('cpu_core_hour_weight') }} as double)
            / (cpu_capacity * cast({{ var('cpu_core_hour_weight') }} as double)
               + memory_gib * cast({{ var('memory_gib_hour_weight') }} as double)) as cpu_part
    from node_cost
    where billed_to > billed_from

),

pods as (

    select
        r.day,
        r.hostname,
        r.currency,
        p.namespace,
        p.pod,
        p.request_id,
        coalesce(p.cpu_requests, 0.0) as cpu_requests,
        coalesce(p.memory_requests, 0.0) / 1073741824.0 as memory_gib_requests,
        greatest(epoch(least(coalesce(p.ended_at, r.billed_to), r.billed_to) - greatest(p.started_at, r.billed_from))
                 / 3600.0, 0.0) as hours,
        cast(r.node_cost as double) * r.cpu_part / (r.cpu_capacity * r.node_hours) as core_hour_price,
        cast(r.node_cost as double) * (1 - r.cpu_part) / (r.memory_gib * r.node_hours) as gib_hour_price
    from rates as r
    inner join {{ ref('stg_pods') }} as p
        on p.node = r.hostname and p.started_at < r.billed_to and coalesce(p.ended_at, r.billed_to) > r.billed_from
    where coalesce(p.cpu_requests, 0) > 0 or coalesce(p.memory_requests, 0) > 0

),

owners as (

    {{ namespace_owners() }}

),

final as (

    select
        p.day,
        p.hostname,
        p.namespace,
        p.pod,
        p.request_id,
        {{ pod_owner() }}
        p.currency,
        p.cpu_requests * p.hours as cpu_core_hours,
        p.memory_gib_requests * p.hours as memory_gib_hours,
        cast(round(p.cpu_requests * p.hours * p.core_hour_price + p.memory_gib_requests * p.hours * p.gib_hour_price, 6)
             as decimal(18, 6)) as cost
    from pods as p
    left join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    left join owners as o on o.namespace = p.namespace

)

select * from final
