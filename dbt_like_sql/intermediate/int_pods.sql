-- Every pod that ran for an admitted request: the ledger's pods (local executor, demo, pods with a
-- recorded host) and the Kubernetes pods labelled with an admitted request's id. On Kubernetes the
-- ledger only knows a placeholder per attempt; the cluster's pods of that request replace all of
-- its ledger pods, each taking the attempt whose ledger window contains the pod's start. (A
-- placeholder may carry a host, e.g. the local executor's machine filled in for pods recorded
-- without one: kept beside the cluster's pods it would count the same GPU time twice, unpriced.)
-- A cluster pod of the request that asks for no GPU or MIG device while the request holds whole GPUs
-- or MIG slices (a CPU step of the request) holds no GPU: it is not a pod here; its CPU node time is
-- the request's in int_cpu_node_cost.
with ledger as (

    select *, 'ledger' as origin from {{ ref('stg_pod_requests') }}

),

admitted as (

    select request_id, bool_or(gpu_resource = 'nvidia.com/gpu' or gpu_resource like 'nvidia.com/mig-%') as device_counted
    from ledger
    group by request_id

),

k8s as (

    select p.*
    from {{ ref('stg_pods') }} as p
    inner join admitted as a on a.request_id = p.request_id
    where p.started_at is not null
      and (coalesce(p.gpu_requests, 0) > 0 or coalesce(p.mig_requests, 0) > 0 or not a.device_counted)

),

k8s_attempts as (

    select
        k.*,
        l.attempt,
        l.flavor_name,
        l.gpu_resource,
        l.gpu_share
    from k8s as k
    left join ledger as l
        on l.request_id = k.request_id
        -- the API gives whole seconds (a pod admitted at 22:01:28.97 shows startTime 22:01:28), and
        -- the platform's and the cluster's clocks may differ by a little: 5 s of slack on each side
        and l.started_at <= k.started_at + interval 5 second
        and (l.ended_at is null or l.ended_at + interval 5 second >= k.started_at)
    qualify row_number() over (partition by k.namespace, k.pod, k.uid order by l.attempt desc nulls last) = 1

),

final as (

    select
        namespace, pod, request_id, attempt, flavor_name, hostname, gpu_uuids, assigned_gpus,
        started_at, ended_at, exit_status, failed, origin, gpu_resource, gpu_share
    from ledger as l
    where l.request_id not in (select request_id from k8s)
    union all
    select
        namespace,
        pod,
        request_id,
        coalesce(attempt, 1) as attempt,
        flavor_name,
        node as hostname,
        cast(null as varchar[]) as gpu_uuids,
        -- whole GPUs requested, else MIG slices (shared replicas: the request's gpu_count)
        cast(coalesce(nullif(gpu_requests, 0), nullif(mig_requests, 0)) as bigint) as assigned_gpus,
        started_at,
        ended_at,
        lower(coalesce(phase, 'running')) as exit_status,
        failed,
        'kubernetes' as origin,
        gpu_resource,
        gpu_share
    from k8s_attempts

)

select * from final
