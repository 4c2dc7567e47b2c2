// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * TestForwarder — local stand-in for Chainlink's KeystoneForwarder 1.0.0, shaped like Chainlink's
 * simulation forwarder (MockKeystoneForwarder): same `report(...)` entry point, same raw-report
 * slicing, same transmission bookkeeping and `ReportProcessed` event, but it is UNSIGNED and
 * PERMISSIONLESS: `reportContext` and `signatures` are accepted and ignored, and anyone may call it.
 * Never deploy it anywhere a receiver trusting it would matter.
 *
 * report(receiver, rawReport, reportContext, signatures):
 *   - rawReport layout: version (1) | workflow_execution_id (32) | timestamp (4) | don_id (4) |
 *     don_config_version (4) | workflow_cid (32) | workflow_name (10) | workflow_owner (20) |
 *     report_id (2) | report body; InvalidReport() when shorter than 109 bytes;
 *   - transmissionId = keccak256(receiver (20 bytes) | workflowExecutionId | reportId);
 *     AlreadyAttempted(transmissionId) when that transmission already succeeded or hit an invalid
 *     receiver (a failed delivery may be retried, as with the real forwarder);
 *   - InsufficientGasForRouting(transmissionId) when too little gas is left to route (same constants
 *     as KeystoneForwarder);
 *   - a receiver that does not report IReceiver through ERC-165 is marked invalid (result false);
 *   - otherwise receiver.onReport(rawReport[45:109], rawReport[109:]) is called with all but 5,000 of
 *     the remaining gas; a revert there does NOT revert report(): it emits
 *     ReportProcessed(receiver, workflowExecutionId, reportId, false).
 */

import {ERC165Checker} from "@openzeppelin/contracts/utils/introspection/ERC165Checker.sol";
import {IKeystoneForwarder} from "./interfaces/IKeystoneForwarder.sol";
import {IReceiver} from "./interfaces/IReceiver.sol";

contract TestForwarder is IKeystoneForwarder {
    struct Transmission {
        address transmitter;
        bool invalidReceiver;
        bool success;
        uint80 gasLimit;
    }

    uint256 internal constant METADATA_LENGTH = 109;
    uint256 internal constant FORWARDER_METADATA_LENGTH = 45;
    uint256 internal constant INTERNAL_GAS_REQUIREMENTS_AFTER_REPORT = 5_000;
    uint256 internal constant INTERNAL_GAS_REQUIREMENTS = 25_000 + INTERNAL_GAS_REQUIREMENTS_AFTER_REPORT;
    uint256 internal constant MINIMUM_GAS_LIMIT = INTERNAL_GAS_REQUIREMENTS + 30_000 * 3 + 10_000;

    string public constant override typeAndVersion = "TestForwarder 1.0.0 (unsigned, permissionless)";

    mapping(bytes32 transmissionId => Transmission) internal s_transmissions;

    function report(
        address receiver,
        bytes calldata rawReport,
        bytes calldata, /* reportContext: not verified */
        bytes[] calldata /* signatures: not verified */
    ) external override {
        if (rawReport.length < METADATA_LENGTH) revert InvalidReport();
        bytes32 workflowExecutionId = bytes32(rawReport[1:33]);
        bytes2 reportId = bytes2(rawReport[107:109]);

        bool result = _route(
            getTransmissionId(receiver, workflowExecutionId, reportId),
            receiver,
            rawReport[FORWARDER_METADATA_LENGTH:METADATA_LENGTH],
            rawReport[METADATA_LENGTH:]
        );
        emit ReportProcessed(receiver, workflowExecutionId, reportId, result);
    }

    function _route(bytes32 transmissionId, address receiver, bytes calldata metadata, bytes calldata body)
        internal
        returns (bool success)
    {
        uint256 available = gasleft();
        if (available < INTERNAL_GAS_REQUIREMENTS + MINIMUM_GAS_LIMIT) {
            revert InsufficientGasForRouting(transmissionId);
        }
        uint256 gasLimit = available - INTERNAL_GAS_REQUIREMENTS;

        Transmission storage t = s_transmissions[transmissionId];
        if (t.success || t.invalidReceiver) revert AlreadyAttempted(transmissionId);
        t.transmitter = msg.sender;
        t.gasLimit = uint80(gasLimit);

        if (!ERC165Checker.supportsInterface(receiver, type(IReceiver).interfaceId)) {
            t.invalidReceiver = true;
            return false;
        }

        bytes memory payload = abi.encodeCall(IReceiver.onReport, (metadata, body));
        uint256 callGas = gasleft() - INTERNAL_GAS_REQUIREMENTS_AFTER_REPORT;
        assembly {
            success := call(callGas, receiver, 0, add(payload, 0x20), mload(payload), 0, 0)
        }
        if (success) t.success = true;
    }

    function getTransmissionId(address receiver, bytes32 workflowExecutionId, bytes2 reportId)
        public
        pure
        override
        returns (bytes32)
    {
        return keccak256(bytes.concat(bytes20(receiver), workflowExecutionId, reportId));
    }

    function getTransmissionInfo(address receiver, bytes32 workflowExecutionId, bytes2 reportId)
        external
        view
        override
        returns (TransmissionInfo memory info)
    {
        bytes32 transmissionId = getTransmissionId(receiver, workflowExecutionId, reportId);
        Transmission memory t = s_transmissions[transmissionId];
        TransmissionState state;
        if (t.transmitter == address(0)) state = TransmissionState.NOT_ATTEMPTED;
        else if (t.invalidReceiver) state = TransmissionState.INVALID_RECEIVER;
        else state = t.success ? TransmissionState.SUCCEEDED : TransmissionState.FAILED;
        info = TransmissionInfo({
            transmissionId: transmissionId,
            state: state,
            transmitter: t.transmitter,
            invalidReceiver: t.invalidReceiver,
            success: t.success,
            gasLimit: t.gasLimit
        });
    }

    function getTransmitter(address receiver, bytes32 workflowExecutionId, bytes2 reportId)
        external
        view
        override
        returns (address)
    {
        return s_transmissions[getTransmissionId(receiver, workflowExecutionId, reportId)].transmitter;
    }
}
