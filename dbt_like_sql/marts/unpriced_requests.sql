-- Requests with GPU time that no price covers: pods on a node with no billing row and no
-- price-book entry, on a host no node inventory or DCGM sample knows, or with no recorded host.
-- Such time has no currency and no cost, so the unit-cost marts (priced rows only) leave it out;
-- this lists it per request over its lifetime, next to the GPU-hours that were priced.
with pods as (

    select * from {{ ref('int_pod_gpu_hours') }}
    where currency is null and allocated_gpu_hours > 0

),

nodes as (

    select day, hostname, model_name from {{ ref('int_gpu_nodes') }}
    where has_telemetry or in_inventory

),

requests as (

    select * from {{ ref('stg_requests') }}

),

priced as (

    select request_id, sum(allocated_gpu_hours) as priced_gpu_hours
    from {{ ref('int_request_cost') }}
    group by request_id

),

reasons as (

    select
        p.request_id,
        p.day,
        p.namespace,
        p.pod,
        p.allocated_gpu_hours,
        case
            when p.hostname is null then 'no node recorded for its pod(s)'
            when n.hostname is null then 'node ' || p.hostname || ' is in no node inventory and sent no DCGM samples'
            else 'node ' || p.hostname || ' has no billing row and no price-book entry for model '
                || coalesce('''' || n.model_name || '''', 'NULL')
        end as reason
    from pods as p
    left join nodes as n on n.day = p.day and n.hostname = p.hostname

),

final as (

    select
        u.request_id,
        r.team,
        r.cost_center,
        r.lane,
        r.workload,
        r.state,
        min(u.day) as first_day,
        max(u.day) as last_day,
        count(distinct u.namespace || '/' || u.pod) as pods,
        sum(u.allocated_gpu_hours) as unpriced_gpu_hours,
        coalesce(any_value(c.priced_gpu_hours), 0.0) as priced_gpu_hours,
        string_agg(distinct u.reason, '; ' order by u.reason)
            || ': no price, so this time is in no unit-cost mart' as reason
    from reasons as u
    left join requests as r on r.request_id = u.request_id
    left join priced as c on c.request_id = u.request_id
    group by u.request_id, r.team, r.cost_center, r.lane, r.workload, r.state

)

select * from final
