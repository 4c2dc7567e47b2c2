// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * ReputationRegistry — ERC-8004 reputation (value/valueDecimals ABI) for local chains.
 *
 * Behaviour follows the ERC-8004 reference ReputationRegistryUpgradeable (erc-8004/erc-8004-contracts,
 * 2.x ABI with int128 value + uint8 valueDecimals), minus upgradeability:
 *   - giveFeedback: require(valueDecimals <= 18, "too many decimals"),
 *     require(|value| <= 1e38, "value too large"), then
 *     require(!identity.isAuthorizedOrOwner(msg.sender, agentId), "Self-feedback not allowed")
 *     (an unknown agent makes the identity registry revert ERC721NonexistentToken);
 *     feedback is stored 1-indexed per (agentId, client = msg.sender); endpoint / feedbackURI /
 *     feedbackHash are only emitted, not stored;
 *   - getSummary requires a non-empty client list ("clientAddresses required"), skips revoked entries,
 *     filters by tag1 / tag2 when they are non-empty, and returns the average of the matching values,
 *     computed in 18-decimal fixed point and expressed with the most frequent valueDecimals among them
 *     (ties: the lowest); (0, 0, 0) when nothing matches. With integer scores (valueDecimals 0) this is
 *     the truncated mean.
 */

import {IIdentityRegistry} from "./interfaces/IIdentityRegistry.sol";

contract ReputationRegistry {
    event NewFeedback(
        uint256 indexed agentId,
        address indexed clientAddress,
        uint64 feedbackIndex,
        int128 value,
        uint8 valueDecimals,
        string indexed indexedTag1,
        string tag1,
        string tag2,
        string endpoint,
        string feedbackURI,
        bytes32 feedbackHash
    );
    event FeedbackRevoked(uint256 indexed agentId, address indexed clientAddress, uint64 indexed feedbackIndex);
    event ResponseAppended(
        uint256 indexed agentId,
        address indexed clientAddress,
        uint64 feedbackIndex,
        address indexed responder,
        string responseURI,
        bytes32 responseHash
    );

    struct Feedback {
        int128 value;
        uint8 valueDecimals;
        bool isRevoked;
        string tag1;
        string tag2;
    }

    struct AllFeedback {
        address[] clients;
        uint64[] feedbackIndexes;
        int128[] values;
        uint8[] valueDecimals;
        string[] tag1s;
        string[] tag2s;
        bool[] revokedStatuses;
    }

    int128 private constant MAX_ABS_VALUE = 1e38;
    uint8 private constant MAX_DECIMALS = 18;

    address private immutable _identityRegistry;

    mapping(uint256 => mapping(address => mapping(uint64 => Feedback))) private _feedback;
    mapping(uint256 => mapping(address => uint64)) private _lastIndex;
    mapping(uint256 => mapping(address => mapping(uint64 => mapping(address => uint64)))) private _responseCount;
    mapping(uint256 => mapping(address => mapping(uint64 => address[]))) private _responders;
    mapping(uint256 => mapping(address => mapping(uint64 => mapping(address => bool)))) private _responderExists;
    mapping(uint256 => address[]) private _clients;
    mapping(uint256 => mapping(address => bool)) private _clientExists;

    constructor(address identityRegistry_) {
        require(identityRegistry_ != address(0), "bad identity");
        _identityRegistry = identityRegistry_;
    }

    // ─── Writes ──────────────────────────────────────────────────────────

    function giveFeedback(
        uint256 agentId,
        int128 value,
        uint8 valueDecimals,
        string calldata tag1,
        string calldata tag2,
        string calldata endpoint,
        string calldata feedbackURI,
        bytes32 feedbackHash
    ) external {
        require(valueDecimals <= MAX_DECIMALS, "too many decimals");
        require(value >= -MAX_ABS_VALUE && value <= MAX_ABS_VALUE, "value too large");
        require(
            !IIdentityRegistry(_identityRegistry).isAuthorizedOrOwner(msg.sender, agentId), "Self-feedback not allowed"
        );

        uint64 index = _store(agentId, value, valueDecimals, tag1, tag2);
        _emitNewFeedback(agentId, index, value, valueDecimals, tag1, tag2, endpoint, feedbackURI, feedbackHash);
    }

    function revokeFeedback(uint256 agentId, uint64 feedbackIndex) external {
        require(feedbackIndex > 0, "index must be > 0");
        require(feedbackIndex <= _lastIndex[agentId][msg.sender], "index out of bounds");
        Feedback storage fb = _feedback[agentId][msg.sender][feedbackIndex];
        require(!fb.isRevoked, "Already revoked");
        fb.isRevoked = true;
        emit FeedbackRevoked(agentId, msg.sender, feedbackIndex);
    }

    function appendResponse(
        uint256 agentId,
        address clientAddress,
        uint64 feedbackIndex,
        string calldata responseURI,
        bytes32 responseHash
    ) external {
        require(feedbackIndex > 0, "index must be > 0");
        require(bytes(responseURI).length > 0, "Empty URI");
        require(feedbackIndex <= _lastIndex[agentId][clientAddress], "index out of bounds");
        if (!_responderExists[agentId][clientAddress][feedbackIndex][msg.sender]) {
            _responderExists[agentId][clientAddress][feedbackIndex][msg.sender] = true;
            _responders[agentId][clientAddress][feedbackIndex].push(msg.sender);
        }
        _responseCount[agentId][clientAddress][feedbackIndex][msg.sender]++;
        emit ResponseAppended(agentId, clientAddress, feedbackIndex, msg.sender, responseURI, responseHash);
    }

    // ─── Views ───────────────────────────────────────────────────────────

    function getIdentityRegistry() external view returns (address) {
        return _identityRegistry;
    }

    function getSummary(uint256 agentId, address[] calldata clientAddresses, string calldata tag1, string calldata tag2)
        external
        view
        returns (uint64 count, int128 summaryValue, uint8 summaryValueDecimals)
    {
        require(clientAddresses.length > 0, "clientAddresses required");
        int256 sumWad;
        uint64[19] memory decimalsSeen;
        (count, sumWad, decimalsSeen) = _aggregate(agentId, clientAddresses, keccak256(bytes(tag1)), keccak256(bytes(tag2)));
        if (count == 0) return (0, 0, 0);

        uint64 best;
        for (uint8 d; d <= MAX_DECIMALS; ++d) {
            if (decimalsSeen[d] > best) {
                best = decimalsSeen[d];
                summaryValueDecimals = d;
            }
        }
        int256 avgWad = sumWad / int256(uint256(count));
        summaryValue = int128(avgWad / int256(10 ** uint256(MAX_DECIMALS - summaryValueDecimals)));
    }

    function readFeedback(uint256 agentId, address clientAddress, uint64 feedbackIndex)
        external
        view
        returns (int128 value, uint8 valueDecimals, string memory tag1, string memory tag2, bool isRevoked)
    {
        require(feedbackIndex > 0, "index must be > 0");
        require(feedbackIndex <= _lastIndex[agentId][clientAddress], "index out of bounds");
        Feedback storage fb = _feedback[agentId][clientAddress][feedbackIndex];
        return (fb.value, fb.valueDecimals, fb.tag1, fb.tag2, fb.isRevoked);
    }

    /// @dev Parameters are taken in memory and the work is done in _readAll to stay within the
    ///      stack limit without via-IR.
    function readAllFeedback(
        uint256 agentId,
        address[] memory clientAddresses,
        string memory tag1,
        string memory tag2,
        bool includeRevoked
    )
        external
        view
        returns (
            address[] memory clients,
            uint64[] memory feedbackIndexes,
            int128[] memory values,
            uint8[] memory valueDecimals,
            string[] memory tag1s,
            string[] memory tag2s,
            bool[] memory revokedStatuses
        )
    {
        AllFeedback memory r = _readAll(agentId, clientAddresses, tag1, tag2, includeRevoked);
        return (r.clients, r.feedbackIndexes, r.values, r.valueDecimals, r.tag1s, r.tag2s, r.revokedStatuses);
    }

    function getLastIndex(uint256 agentId, address clientAddress) external view returns (uint64) {
        return _lastIndex[agentId][clientAddress];
    }

    function getClients(uint256 agentId) external view returns (address[] memory) {
        return _clients[agentId];
    }

    function getResponseCount(uint256 agentId, address clientAddress, uint64 feedbackIndex, address[] calldata responders)
        external
        view
        returns (uint64 count)
    {
        if (clientAddress == address(0)) {
            address[] storage clients = _clients[agentId];
            for (uint256 i; i < clients.length; ++i) {
                uint64 last = _lastIndex[agentId][clients[i]];
                for (uint64 j = 1; j <= last; ++j) {
                    count += _countResponses(agentId, clients[i], j, responders);
                }
            }
        } else if (feedbackIndex == 0) {
            uint64 last = _lastIndex[agentId][clientAddress];
            for (uint64 j = 1; j <= last; ++j) {
                count += _countResponses(agentId, clientAddress, j, responders);
            }
        } else {
            count = _countResponses(agentId, clientAddress, feedbackIndex, responders);
        }
    }

    function getVersion() external pure returns (string memory) {
        return "2.0.0-local";
    }

    // ─── Internals ───────────────────────────────────────────────────────

    function _store(uint256 agentId, int128 value, uint8 valueDecimals, string calldata tag1, string calldata tag2)
        private
        returns (uint64 index)
    {
        index = ++_lastIndex[agentId][msg.sender];
        _feedback[agentId][msg.sender][index] =
            Feedback({value: value, valueDecimals: valueDecimals, isRevoked: false, tag1: tag1, tag2: tag2});
        if (!_clientExists[agentId][msg.sender]) {
            _clientExists[agentId][msg.sender] = true;
            _clients[agentId].push(msg.sender);
        }
    }

    function _emitNewFeedback(
        uint256 agentId,
        uint64 index,
        int128 value,
        uint8 valueDecimals,
        string calldata tag1,
        string calldata tag2,
        string calldata endpoint,
        string calldata feedbackURI,
        bytes32 feedbackHash
    ) private {
        emit NewFeedback(
            agentId, msg.sender, index, value, valueDecimals, tag1, tag1, tag2, endpoint, feedbackURI, feedbackHash
        );
    }

    function _tagsMatch(Feedback storage fb, bytes32 tag1Hash, bytes32 tag2Hash) private view returns (bool) {
        bytes32 empty = keccak256("");
        if (tag1Hash != empty && tag1Hash != keccak256(bytes(fb.tag1))) return false;
        if (tag2Hash != empty && tag2Hash != keccak256(bytes(fb.tag2))) return false;
        return true;
    }

    function _aggregate(uint256 agentId, address[] calldata clientList, bytes32 tag1Hash, bytes32 tag2Hash)
        private
        view
        returns (uint64 count, int256 sumWad, uint64[19] memory decimalsSeen)
    {
        for (uint256 i; i < clientList.length; ++i) {
            uint64 last = _lastIndex[agentId][clientList[i]];
            for (uint64 j = 1; j <= last; ++j) {
                Feedback storage fb = _feedback[agentId][clientList[i]][j];
                if (fb.isRevoked || !_tagsMatch(fb, tag1Hash, tag2Hash)) continue;
                sumWad += int256(fb.value) * int256(10 ** uint256(MAX_DECIMALS - fb.valueDecimals));
                decimalsSeen[fb.valueDecimals]++;
                count++;
            }
        }
    }

    function _matching(
        uint256 agentId,
        address[] memory clientList,
        bytes32 tag1Hash,
        bytes32 tag2Hash,
        bool includeRevoked
    ) private view returns (address[] memory clients, uint64[] memory indexes) {
        uint256 total;
        for (uint256 pass; pass < 2; ++pass) {
            if (pass == 1) {
                clients = new address[](total);
                indexes = new uint64[](total);
                total = 0;
            }
            for (uint256 i; i < clientList.length; ++i) {
                uint64 last = _lastIndex[agentId][clientList[i]];
                for (uint64 j = 1; j <= last; ++j) {
                    Feedback storage fb = _feedback[agentId][clientList[i]][j];
                    if ((!includeRevoked && fb.isRevoked) || !_tagsMatch(fb, tag1Hash, tag2Hash)) continue;
                    if (pass == 1) {
                        clients[total] = clientList[i];
                        indexes[total] = j;
                    }
                    total++;
                }
            }
        }
    }

    function _readAll(
        uint256 agentId,
        address[] memory clientAddresses,
        string memory tag1,
        string memory tag2,
        bool includeRevoked
    ) private view returns (AllFeedback memory r) {
        address[] memory clientList = clientAddresses.length > 0 ? clientAddresses : _clients[agentId];
        (r.clients, r.feedbackIndexes) =
            _matching(agentId, clientList, keccak256(bytes(tag1)), keccak256(bytes(tag2)), includeRevoked);
        uint256 n = r.clients.length;
        r.values = new int128[](n);
        r.valueDecimals = new uint8[](n);
        r.tag1s = new string[](n);
        r.tag2s = new string[](n);
        r.revokedStatuses = new bool[](n);
        for (uint256 i; i < n; ++i) {
            Feedback storage fb = _feedback[agentId][r.clients[i]][r.feedbackIndexes[i]];
            r.values[i] = fb.value;
            r.valueDecimals[i] = fb.valueDecimals;
            r.tag1s[i] = fb.tag1;
            r.tag2s[i] = fb.tag2;
            r.revokedStatuses[i] = fb.isRevoked;
        }
    }

    function _countResponses(uint256 agentId, address clientAddress, uint64 feedbackIndex, address[] calldata responders)
        private
        view
        returns (uint64 count)
    {
        if (responders.length == 0) {
            address[] storage all = _responders[agentId][clientAddress][feedbackIndex];
            for (uint256 k; k < all.length; ++k) {
                count += _responseCount[agentId][clientAddress][feedbackIndex][all[k]];
            }
        } else {
            for (uint256 k; k < responders.length; ++k) {
                count += _responseCount[agentId][clientAddress][feedbackIndex][responders[k]];
            }
        }
    }
}
