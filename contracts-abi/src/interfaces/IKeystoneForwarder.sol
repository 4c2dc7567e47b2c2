// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title IKeystoneForwarder
/// @notice Report-delivery surface of Chainlink's KeystoneForwarder 1.0.0 (and its unsigned simulation
///         variant), as used by a submitter: `report(...)`, the `ReportProcessed` event, the transmission
///         look-ups and every custom error the production forwarder can revert with.
interface IKeystoneForwarder {
    enum TransmissionState {
        NOT_ATTEMPTED,
        SUCCEEDED,
        INVALID_RECEIVER,
        FAILED
    }

    struct TransmissionInfo {
        bytes32 transmissionId;
        TransmissionState state;
        address transmitter;
        bool invalidReceiver;
        bool success;
        uint80 gasLimit;
    }

    /// @param result True when the receiver's onReport succeeded. The forwarder does NOT revert when
    ///        the receiver reverts, so a submitter must check this flag.
    event ReportProcessed(
        address indexed receiver, bytes32 indexed workflowExecutionId, bytes2 indexed reportId, bool result
    );

    error InvalidReport();
    error InvalidConfig(uint64 configId);
    error InvalidSignatureCount(uint256 expected, uint256 received);
    error InvalidSignature(bytes signature);
    error InvalidSigner(address signer);
    error DuplicateSigner(address signer);
    error UnauthorizedForwarder();
    error AlreadyAttempted(bytes32 transmissionId);
    error InsufficientGasForRouting(bytes32 transmissionId);

    /// @param rawReport version (1) | workflow_execution_id (32) | timestamp (4) | don_id (4) |
    ///        don_config_version (4) | workflow_cid (32) | workflow_name (10) | workflow_owner (20) |
    ///        report_id (2) | report body (from byte 109).
    function report(
        address receiver,
        bytes calldata rawReport,
        bytes calldata reportContext,
        bytes[] calldata signatures
    ) external;

    function getTransmissionId(address receiver, bytes32 workflowExecutionId, bytes2 reportId)
        external
        pure
        returns (bytes32);

    function getTransmissionInfo(address receiver, bytes32 workflowExecutionId, bytes2 reportId)
        external
        view
        returns (TransmissionInfo memory);

    function getTransmitter(address receiver, bytes32 workflowExecutionId, bytes2 reportId)
        external
        view
        returns (address);

    function typeAndVersion() external view returns (string memory);
}
