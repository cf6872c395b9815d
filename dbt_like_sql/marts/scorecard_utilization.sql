-- GPU allocated vs busy per day by node pool, flavor, lane, team, site, sharing mode and profile. Node pools also
-- carry their capacity (the nodes' GPU-hours), so busy / capacity says how much of what the pool
-- costs did work.
with flavors as (

    -- the policy's flavors, bound as one list of 'name|node_pool|sharing mode|spot'
    select
        split_part(f, '|', 1) as flavor_name,
        split_part(f, '|', 2) as node_pool,
        split_part(f, '|', 3) as flavor_mode
    from unnest(cast({{ var('flavor_catalog') }} as varchar[])) as t(f)

),

rows_on as (

    select
        list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'utilization') as utilization,
        list_contains(cast({{ var('scorecard_rows') }} as varchar[]), 'sharing_utilization') as sharing

),

pods as (

    select
        p.day,
        p.hostname,
        p.flavor_name,
        -- the pool of the pod's flavor, else that of the node it ran on (its inventory label)
        coalesce(f.node_pool, n.node_pool, 'unknown') as node_pool,
        coalesce(m.sharing_mode, 'exclusive') as sharing_mode,
        coalesce(m.profile, 'whole') as profile,
        r.lane,
        r.team,
        r.site,
        p.allocated_gpu_hours,
        p.used_gpu_hours
    from {{ ref('int_pod_gpu_hours') }} as p
    left join flavors as f on f.flavor_name = p.flavor_name
    left join {{ ref('stg_request_metadata') }} as m on m.request_id = p.request_id
    left join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    left join {{ ref('stg_nodes') }} as n on n.day = p.day and n.node = p.hostname and n.has_gpus
    where p.day between {{ var('day_from') }} and {{ var('day_to') }}

),

host_pools as (

    -- a node belongs to the pool of the flavor its pods ran on, else its inventory label
    select c.day, c.hostname, c.capacity_gpu_hours,
           coalesce(min(p.node_pool), min(n.node_pool), 'unknown') as node_pool
    from {{ ref('int_idle_capacity') }} as c
    left join pods as p on p.day = c.day and p.hostname = c.hostname
    left join {{ ref('stg_nodes') }} as n on n.day = c.day and n.node = c.hostname and n.has_gpus
    where c.day between {{ var('day_from') }} and {{ var('day_to') }}
    group by c.day, c.hostname, c.capacity_gpu_hours

),

capacity as (

    select day, node_pool, sum(capacity_gpu_hours) as capacity_gpu_hours
    from host_pools
    group by day, node_pool

),

long as (

    select day, 'node_pool' as dimension, node_pool as subject, allocated_gpu_hours, used_gpu_hours from pods
    where (select utilization from rows_on)
    union all
    select day, 'flavor', flavor_name, allocated_gpu_hours, used_gpu_hours from pods
    where (select utilization from rows_on)
    union all
    select day, 'lane', lane, allocated_gpu_hours, used_gpu_hours from pods
    where (select utilization from rows_on)
    union all
    select day, 'team', team, allocated_gpu_hours, used_gpu_hours from pods
    where (select utilization from rows_on)
    union all
    select day, 'site', site, allocated_gpu_hours, used_gpu_hours from pods
    where (select utilization from rows_on)
    union all
    select day, 'sharing_mode', sharing_mode, allocated_gpu_hours, used_gpu_hours from pods
    where (select sharing from rows_on)
    union all
    select day, 'profile', profile, allocated_gpu_hours, used_gpu_hours from pods
    where (select sharing from rows_on)
    union all
    -- a pool whose nodes ran nothing still has a row: its capacity sat idle
    select day, 'node_pool', node_pool, 0.0, 0.0 from capacity
    where (select utilization from rows_on)

),

final as (

    select
        l.day,
        l.dimension,
        l.subject,
        sum(l.allocated_gpu_hours) as allocated_gpu_hours,
        sum(l.used_gpu_hours) as used_gpu_hours,
        max(c.capacity_gpu_hours) as capacity_gpu_hours,
        sum(l.used_gpu_hours) / nullif(sum(l.allocated_gpu_hours), 0) as busy_of_allocated,
        sum(l.used_gpu_hours) / nullif(max(c.capacity_gpu_hours), 0) as busy_of_capacity,
        sum(l.allocated_gpu_hours) / nullif(max(c.capacity_gpu_hours), 0) as allocated_of_capacity
    from long as l
    left join capacity as c on l.dimension = 'node_pool' and c.day = l.day and c.node_pool = l.subject
    group by l.day, l.dimension, l.subject

)

select * from final
