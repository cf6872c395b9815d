-- GPU time on no admitted request (the bypass signal), per pod and day, priced at its node's price:
-- Kubernetes pods requesting GPUs without an admitted request's id, and pods DCGM saw on a GPU that
-- no inventory or ledger pod explains. A pod in a namespace a team owns (var team_namespaces, from
-- the policy's teams.<team>.namespace) is that team's bypass: charged to it, flagged bypass. Only
-- the time of pods nobody owns is held on the (unreconciled) chargeback row.
with days as (

    select * from {{ ref('int_build_days') }}

),

attributed as (

    select namespace, pod from {{ ref('int_pods') }}

),

admitted as (

    select distinct request_id from {{ ref('stg_pod_requests') }}

),

k8s as (

    select
        d.day,
        p.node as hostname,
        p.namespace,
        p.pod,
        p.request_id,
        case when p.request_id is null then 'pod has no gpu-platform.io/request-id'
             else 'request ' || p.request_id || ' was never admitted' end as reason,
        epoch(least(coalesce(p.ended_at, d.day_end), d.day_end) - greatest(p.started_at, d.day_start)) / 3600.0
            * p.gpu_requests as gpu_hours
    from {{ ref('stg_pods') }} as p
    inner join days as d
        on p.started_at < d.day_end and coalesce(p.ended_at, d.day_end) > d.day_start
    anti join attributed as a on a.namespace = p.namespace and a.pod = p.pod
    where p.gpu_requests > 0 and p.node is not null
      and (p.request_id is null or p.request_id not in (select request_id from admitted))

),

sampled as (

    -- pods on DCGM samples that neither the ledger nor the inventory explains: each sample of a
    -- GPU stands for one collect interval held; a MIG instance's sample for its share of the GPU
    -- (compute slices / 7 of its GPU_I_PROFILE)
    select
        day,
        hostname,
        namespace,
        pod,
        cast(null as varchar) as request_id,
        'DCGM samples of a pod no inventory or ledger knows' as reason,
        sum(samples * slice_share) * {{ var('sample_interval_s') }} / 3600.0 as gpu_hours
    from (
        select
            day, hostname, gpu, gpu_instance_id, namespace, pod, max(samples) as samples,
            coalesce(try_cast(regexp_extract(min(gpu_instance_profile), '^([1-7])g\.', 1) as integer) / 7.0, 1.0)
                as slice_share
        from {{ ref('int_gpu_busy') }}
        where day between {{ var('day_from') }} and {{ var('day_to') }} and pod is not null
        group by all
    ) as g
    anti join attributed as a on a.namespace = g.namespace and a.pod = g.pod
    anti join {{ ref('stg_pods') }} as p on p.namespace = g.namespace and p.pod = g.pod
    group by day, hostname, namespace, pod

),

pods as (

    select * from k8s
    union all
    select * from sampled

),

owners as (

    {{ namespace_owners() }}

),

prices as (

    select * from {{ ref('int_node_hour_prices') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

final as (

    select
        u.day,
        u.hostname,
        u.namespace,
        u.pod,
        u.request_id,
        u.reason,
        u.gpu_hours,
        p.currency,
        p.price_source,
        cast(round(u.gpu_hours * cast(p.node_cost as double) / p.capacity_gpu_hours, 6) as decimal(18, 6)) as cost,
        o.team,
        o.cost_center,
        coalesce(o.site, 'unknown') as site,
        o.team is not null as bypass
    from pods as u
    left join prices as p on p.day = u.day and p.hostname = u.hostname
    left join owners as o on o.namespace = u.namespace

)

select * from final
