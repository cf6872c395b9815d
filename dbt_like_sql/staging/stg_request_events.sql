-- The request ledger's events (raw_request_events): one row per state change, in ledger order,
-- with the detail fields the scorecards read pulled out of the details JSON.
with source as (

    select * from {{ source('raw_request_events') }}

),

final as (

    select
        request_id,
        seq,
        lower(event) as event,
        event_at,
        reason,
        flavor,
        run_id,
        details,
        -- preempted: the preemptor; approved: the approval's kind, role and approver
        json_extract_string(details, '$.reason_code') as reason_code,
        json_extract_string(details, '$.by') as preempted_by,
        json_extract_string(details, '$.kind') as approval_kind,
        json_extract_string(details, '$.role') as approval_role,
        json_extract_string(details, '$.approver') as approver,
        -- preempted: when the attempt last checkpointed, when the event records it
        try_cast(json_extract_string(details, '$.checkpoint_at') as timestamp) as checkpoint_at
    from source

)

select * from final
